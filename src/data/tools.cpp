// Data tools, part 1: stratified sampling, the small pieces the tools share (flag parsing,
// class folder names, output folders, the error-ordered parallel loop) and dataset_stats.
// Not the writers: create_dataset and export_images are in tools_write.cpp. Over 500 lines:
// the sampling, the shared pieces and dataset_stats are about a third each, and split further
// each would be a file of one caller.
#include "data/tools.h"

#include <omp.h>

#include <boost/program_options/errors.hpp>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <numeric>
#include <sstream>

#include "core/check.h"
#include "core/text.h"
#include "core/rng.h"
#include "core/threads.h"
#include "data/transform.h"
#include "io/atomic_file.h"

namespace fs = std::filesystem;

namespace mpicnn::data {

// ---- stratified sampling ----------------------------------------------------------------------

std::vector<size_t> apportion(std::span<const size_t> weights, size_t total, std::span<const size_t> lo,
                              std::span<const size_t> hi) {
  const size_t K = weights.size();
  CHECK(lo.size() == K && hi.size() == K, "apportion: ", K, " weights but ", lo.size(), " / ", hi.size(),
        " bounds");
  using i128 = __int128;
  i128 W = 0, sum_lo = 0, sum_hi = 0;
  for (size_t k = 0; k < K; ++k) {
    CHECK(lo[k] <= hi[k], "apportion: bounds of share ", k, " are crossed (", lo[k], " > ", hi[k], ")");
    W += weights[k], sum_lo += lo[k], sum_hi += hi[k];
  }
  CHECK(sum_lo <= i128(total) && i128(total) <= sum_hi, "apportion: cannot share ", total,
        " within the bounds (", uint64_t(sum_lo), " to ", uint64_t(sum_hi), ")");
  // key[k] = W * (ideal share - share), in exact integers: the largest key is the share furthest
  // below its ideal. With W == 0 every ideal is 0 and the shares even out from the low bounds.
  std::vector<size_t> q(K);
  std::vector<i128> key(K);
  i128 sum = 0;
  for (size_t k = 0; k < K; ++k) {
    const i128 ideal_num = i128(total) * i128(weights[k]);
    const i128 floor_share = W > 0 ? ideal_num / W : 0;
    q[k] = size_t(std::clamp<i128>(floor_share, i128(lo[k]), i128(hi[k])));
    key[k] = ideal_num - i128(q[k]) * W;
    sum += q[k];
  }
  // Whatever the bounds moved is given back one unit at a time: largest remainder first when
  // short (ties to the lower index), smallest remainder first when over (ties to the higher).
  while (sum < i128(total)) {
    size_t best = K;
    for (size_t k = 0; k < K; ++k)
      if (q[k] < hi[k] && (best == K || key[k] > key[best])) best = k;
    ++q[best], key[best] -= W, ++sum;
  }
  while (sum > i128(total)) {
    size_t best = K;
    for (size_t k = 0; k < K; ++k)
      if (q[k] > lo[k] && (best == K || key[k] <= key[best])) best = k;
    --q[best], key[best] += W, --sum;
  }
  return q;
}

std::vector<size_t> count_labels(std::span<const int32_t> labels, int num_classes) {
  CHECK(num_classes > 0, "no classes");
  std::vector<size_t> counts(size_t(num_classes), 0);
  for (size_t i = 0; i < labels.size(); ++i) {
    CHECK(labels[i] >= 0 && labels[i] < num_classes, "sample ", i, ": label ", labels[i], " is outside [0, ",
          num_classes, ")");
    ++counts[size_t(labels[i])];
  }
  return counts;
}

std::vector<size_t> stratified_quotas(std::span<const size_t> counts, size_t size) {
  const size_t available = std::accumulate(counts.begin(), counts.end(), size_t(0));
  CHECK(size <= available, "cannot sample ", size, " of ", available, " samples");
  const size_t nonempty = size_t(std::count_if(counts.begin(), counts.end(), [](size_t c) { return c > 0; }));
  std::vector<size_t> lo(counts.size(), 0);
  if (size >= nonempty)
    for (size_t k = 0; k < counts.size(); ++k) lo[k] = counts[k] > 0 ? 1 : 0;
  return apportion(counts, size, lo, counts);
}

StratifiedSplit stratified_split(std::span<const int32_t> labels, int num_classes, size_t size,
                                 double test_fraction, uint64_t seed) {
  CHECK(test_fraction >= 0 && test_fraction <= 1, "test fraction ", test_fraction, " is outside [0, 1]");
  const std::vector<size_t> counts = count_labels(labels, num_classes);
  const std::vector<size_t> quota = stratified_quotas(counts, size);
  const size_t K = counts.size();

  // Test shares: proportional to the class samples, each class with two or more keeping one
  // sample on each side. Where the total cannot respect that, the bound gives way, not the total.
  const size_t test_total = size_t(std::llround(double(size) * test_fraction));
  std::vector<size_t> lo(K), hi(K);
  size_t sum_lo = 0, sum_hi = 0;
  for (size_t k = 0; k < K; ++k) {
    lo[k] = test_fraction > 0 && quota[k] >= 2 ? 1 : 0;
    hi[k] = test_fraction < 1 && quota[k] >= 1 ? quota[k] - 1 : quota[k];
    sum_lo += lo[k], sum_hi += hi[k];
  }
  if (test_total > sum_hi) hi = quota;
  if (test_total < sum_lo) std::fill(lo.begin(), lo.end(), 0);
  const std::vector<size_t> test_quota = apportion(quota, test_total, lo, hi);

  std::vector<std::vector<uint64_t>> members(K);
  for (size_t i = 0; i < labels.size(); ++i) members[size_t(labels[i])].push_back(i);
  const Rng rng(seed, stream_id("data_tools/stratified_split"));
  StratifiedSplit out;
  for (size_t k = 0; k < K; ++k) {
    std::vector<uint64_t>& m = members[k];
    CHECK(m.size() < (uint64_t(1) << 32), "class ", k, ": more than 2^32 samples");
    // Partial Fisher-Yates: m[0, quota) becomes a uniform random ordered sample; draw j of
    // class k has its own counter, so a class's draws do not depend on the other classes.
    for (size_t j = 0; j < quota[k]; ++j) {
      const uint64_t r = j + rng.below((uint64_t(k) << 32) | j, m.size() - j);
      std::swap(m[j], m[r]);
    }
    out.test.insert(out.test.end(), m.begin(), m.begin() + long(test_quota[k]));
    out.train.insert(out.train.end(), m.begin() + long(test_quota[k]), m.begin() + long(quota[k]));
  }
  std::sort(out.train.begin(), out.train.end());
  std::sort(out.test.begin(), out.test.end());
  return out;
}

std::vector<int32_t> dataset_labels(const Dataset& ds) {
  std::vector<int32_t> labels(ds.size());
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = ds.label(i);
  return labels;
}

// ---- small shared pieces ----------------------------------------------------------------------

Image ResizeSpec::apply(const Image& img) const {
  if (shorter > 0) return resize_shorter(img, shorter);
  if (height > 0) return resize(img, height, width);
  return img;
}

std::string ResizeSpec::str() const {
  if (shorter > 0) return std::to_string(shorter);
  if (height > 0) return std::to_string(height) + "x" + std::to_string(width);
  return "none";
}

namespace {

// A whole-string positive size for --resize; 0 when `s` is not one.
int parse_side(std::string_view s) {
  int v = 0;
  const auto [end, err] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || err != std::errc() || end != s.data() + s.size() || v <= 0 || v > 65535) return 0;
  return v;
}

}  // namespace

ResizeSpec parse_resize(const std::string& text, const std::string& flag) {
  ResizeSpec r;
  const size_t x = text.find_first_of("xX");
  if (x == std::string::npos) {
    r.shorter = parse_side(text);
  } else {
    r.height = parse_side(std::string_view(text).substr(0, x));
    r.width = parse_side(std::string_view(text).substr(x + 1));
    if (r.height == 0 || r.width == 0) r.height = r.width = 0;
  }
  CHECK(r.active(), flag, ": '", text,
        "' is not a size S (shorter side) or HxW, each in [1, 65535] (e.g. 64 or 64x48)");
  return r;
}

uint64_t parse_u64(const std::string& text, const std::string& flag) {
  uint64_t v = 0;
  const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), v);
  CHECK(!text.empty() && err == std::errc() && end == text.data() + text.size(), flag, ": '", text,
        "' is not a non-negative integer");
  return v;
}

std::vector<int> parse_class_list(const std::string& text, const std::vector<std::string>& class_names,
                                  const std::string& flag) {
  const int K = int(class_names.size());
  auto index = [&](const std::string& s) {
    const uint64_t v = parse_u64(s, flag);
    CHECK(v < uint64_t(K), flag, ": class ", s, " is out of range (the data has ", K, " classes, 0-", K - 1, ")");
    return int(v);
  };
  std::vector<int> out;
  std::stringstream items(text);
  for (std::string item; std::getline(items, item, ',');) {
    const auto named = std::find(class_names.begin(), class_names.end(), item);
    const size_t dash = item.find('-');
    const bool digits = !item.empty() && item.find_first_not_of("0123456789-") == std::string::npos;
    if (named != class_names.end()) {
      out.push_back(int(named - class_names.begin()));
    } else if (digits && dash == std::string::npos) {
      out.push_back(index(item));
    } else if (digits && dash > 0 && item.find('-', dash + 1) == std::string::npos) {
      const int lo = index(item.substr(0, dash)), hi = index(item.substr(dash + 1));
      CHECK(lo <= hi, flag, ": range ", item, " runs backwards");
      for (int c = lo; c <= hi; ++c) out.push_back(c);
    } else {
      FAIL(flag, ": '", item, "' is neither a class index, a range like 0-4, nor a class name");
    }
  }
  CHECK(!out.empty(), flag, ": no classes listed");
  for (size_t i = 0; i < out.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      CHECK(out[i] != out[j], flag, ": class ", out[i], " (", class_names[size_t(out[i])], ") is listed twice");
  return out;
}

double parse_double(const std::string& text, const std::string& flag) {
  double v = 0;
  const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), v);
  CHECK(!text.empty() && err == std::errc() && end == text.data() + text.size() && std::isfinite(v), flag, ": '",
        text, "' is not a number");
  return v;
}

namespace {

std::string sanitize_folder_name(const std::string& name) {
  std::string s = name.empty() ? "_" : name;
  for (char& c : s)
    if (c == '/' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '_';
  if (s[0] == '.') s[0] = '_';  // hidden folders are skipped by image-folder scans
  return s;
}

constexpr const char* kMarker = ".mpicnn_output";

}  // namespace

std::vector<std::string> class_folder_names(const std::vector<std::string>& class_names) {
  bool plain = true;
  for (size_t k = 0; k < class_names.size() && plain; ++k)
    plain = sanitize_folder_name(class_names[k]) == class_names[k] && (k == 0 || class_names[k - 1] < class_names[k]);
  std::vector<std::string> out;
  const int width = int(std::to_string(class_names.empty() ? 0 : class_names.size() - 1).size());
  for (size_t k = 0; k < class_names.size(); ++k)
    out.push_back(plain ? class_names[k] : zero_pad(k, width) + "_" + sanitize_folder_name(class_names[k]));
  return out;
}

void prepare_output_folder(const std::string& dir, bool force, const std::string& tool,
                           const std::vector<std::string>& outputs) {
  CHECK(!dir.empty(), "no output folder given (--output)");
  std::error_code ec;
  const fs::path root(dir);
  if (fs::exists(root, ec)) {
    CHECK(fs::is_directory(root, ec), dir, ": exists and is not a folder");
    if (!fs::is_empty(root, ec)) {
      CHECK(force, dir, ": output folder is not empty (--force writes into it)");
      const fs::path marker = root / kMarker;
      bool ours = false;
      if (fs::is_regular_file(marker, ec)) {
        const std::vector<uint8_t> m = read_file_bytes(marker.string());
        ours = std::string(m.begin(), m.end()) == tool + "\n";
      }
      for (const std::string& o : outputs) {
        const fs::path p = root / o;
        if (!fs::exists(fs::symlink_status(p, ec))) continue;
        if (ours) {
          fs::remove_all(p, ec);
          CHECK(!ec, p.string(), ": cannot remove the previous output (", ec.message(), ")");
        } else {
          // Another program's folder: new files mixed into it would be read back with the old.
          CHECK(!fs::is_directory(p, ec) || fs::is_empty(p, ec), p.string(), ": exists and was not written by ",
                tool, "; remove it or choose another --output");
        }
      }
    }
  } else {
    fs::create_directories(root, ec);
    CHECK(!ec, dir, ": cannot create the output folder (", ec.message(), ")");
  }
  const std::string text = tool + "\n";
  write_file_atomic((root / kMarker).string(),
                    std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

int resolve_threads(int threads) { return threads > 0 ? threads : default_num_threads(); }

int writer_threads(int threads) { return threads > 0 ? threads : std::clamp(4 * default_num_threads(), 16, 64); }

void parallel_for(size_t n, int threads, const std::function<void(size_t, int)>& fn) {
  threads = resolve_threads(threads);
  std::mutex mu;
  std::exception_ptr err;
  std::atomic<size_t> first{n};  // lowest failing index so far; later indices need not run
#pragma omp parallel for num_threads(threads) schedule(dynamic, 4)
  for (size_t i = 0; i < n; ++i) {
    if (i > first.load(std::memory_order_relaxed)) continue;
    try {
      fn(i, omp_get_thread_num());
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (i < first.load()) first = i, err = std::current_exception();
    }
  }
  if (err) std::rethrow_exception(err);
}

std::string csv_field(const std::string& s) {
  const bool quote = s.find_first_of(",\"\r\n") != std::string::npos || s.empty() || s.front() == ' ' ||
                     s.front() == '\t' || s.back() == ' ' || s.back() == '\t';
  if (!quote) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string format_flag_values(std::span<const double> values) {
  std::string s;
  char buf[32];
  for (size_t i = 0; i < values.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%.4f", values[i]);
    if (i) s += ',';
    s += buf;
  }
  return s;
}

void check_choice(const std::string& value, std::initializer_list<const char*> choices, const std::string& flag) {
  std::string list;
  for (const char* c : choices) {
    if (value == c) return;
    if (!list.empty()) list += ", ";
    list += c;
  }
  FAIL(flag, ": '", value, "' is not one of ", list);
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

int run_tool(const std::string& tool, const std::function<int()>& body, std::ostream& err) {
  try {
    return body();
  } catch (const Error& e) {
    err << tool << ": " << one_line(e.message()) << "\n";
  } catch (const boost::program_options::error& e) {
    err << tool << ": " << one_line(e.what()) << " (see --help)\n";
  } catch (const std::exception& e) {
    err << tool << ": " << one_line(e.what()) << "\n";
  }
  return 1;
}

// ---- dataset_stats ----------------------------------------------------------------------------

DatasetStats dataset_stats(const Dataset& ds, const StatsOptions& opt) {
  DatasetStats s;
  s.source = ds.describe();
  s.samples = ds.size();
  s.class_names = ds.class_names();
  s.resize = opt.resize;
  s.seed = opt.seed;
  CHECK(s.samples > 0, s.source, ": no samples");
  CHECK(opt.channels == 0 || opt.channels == 1 || opt.channels == 3, "--channels: ", opt.channels,
        " is not 0, 1 or 3");
  const std::vector<int32_t> labels = dataset_labels(ds);
  s.counts = count_labels(labels, ds.num_classes());

  std::vector<uint64_t> used;
  if (opt.limit == 0 || opt.limit >= s.samples) {
    used.resize(s.samples);
    std::iota(used.begin(), used.end(), uint64_t(0));
  } else {
    used = stratified_split(labels, ds.num_classes(), opt.limit, 0.0, opt.seed).train;
  }
  // Mixed gray/RGB files need one channel count; the first used image decides, not whichever
  // thread finishes first (with skip_bad, the first that loads).
  int C = opt.channels > 0 ? opt.channels : ds.channels();
  for (size_t j = 0; C == 0 && j < used.size(); ++j) {
    try {
      C = ds.load(used[j], 0).channels;
    } catch (const Error&) {
      if (!opt.skip_bad) throw;
    }
  }
  CHECK(C > 0, ds.describe(), ": none of the ", used.size(), " images could be read");
  s.channels = C;

  const int threads = resolve_threads(opt.threads);
  std::vector<uint64_t> hist(size_t(threads) * size_t(C) * 256, 0);  // (thread, C, 256)
  std::vector<std::string> bad(used.size());                         // (used): why, if unreadable
  parallel_for(used.size(), threads, [&](size_t j, int t) {
    Image img;
    try {
      img = opt.resize.apply(ds.load(used[j], C));
    } catch (const Error& e) {
      if (!opt.skip_bad) throw;
      bad[j] = e.message();
      return;
    }
    uint64_t* h = hist.data() + size_t(t) * size_t(C) * 256;
    const size_t n = img.pixels.size();
    for (size_t p = 0; p < n; p += size_t(C))
      for (int c = 0; c < C; ++c) ++h[size_t(c) * 256 + img.pixels[p + size_t(c)]];
  });
  s.used_counts.assign(s.counts.size(), 0);
  for (size_t j = 0; j < used.size(); ++j) {
    if (bad[j].empty()) ++s.used_counts[size_t(labels[used[j]])];
    else s.skipped.push_back({ds.source(used[j]), bad[j]});
  }
  s.used = used.size() - s.skipped.size();
  CHECK(s.used > 0, ds.describe(), ": none of the ", used.size(), " images could be read");
  for (int t = 1; t < threads; ++t)
    for (size_t b = 0; b < size_t(C) * 256; ++b) hist[b] += hist[size_t(t) * size_t(C) * 256 + b];

  for (int c = 0; c < C; ++c) {
    const uint64_t* h = hist.data() + size_t(c) * 256;
    uint64_t n = 0, sum = 0;
    for (int v = 0; v < 256; ++v) n += h[v], sum += h[v] * uint64_t(v);
    s.pixels = n;
    const double mean = double(sum) / (255.0 * double(n));
    double var = 0;
    for (int v = 0; v < 256; ++v) {
      const double d = v / 255.0 - mean;
      var += double(h[v]) * d * d;
    }
    s.mean.push_back(mean);
    s.stddev.push_back(std::sqrt(var / double(n)));
  }
  return s;
}

namespace {

std::string json_string(const std::string& s) {
  std::string o = "\"";
  char buf[8];
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      o += '\\', o += ch;
    } else if (c < 0x20) {
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      o += buf;
    } else {
      o += ch;
    }
  }
  return o + "\"";
}

std::string json_number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string fixed(double v, int decimals) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string pad_right(std::string s, size_t w) { return s.size() < w ? s + std::string(w - s.size(), ' ') : s; }
std::string pad_left(std::string s, size_t w) { return s.size() < w ? std::string(w - s.size(), ' ') + s : s; }

}  // namespace

std::string format_stats(const DatasetStats& s) {
  std::string o = "dataset: " + s.source + "\n";
  o += "images:  " + std::to_string(s.used) + " of " + std::to_string(s.samples);
  if (s.used < s.samples) o += " (stratified sample, seed " + std::to_string(s.seed) + ")";
  o += ", " + std::to_string(s.channels) + " channel" + (s.channels > 1 ? "s" : "") + ", resize " + s.resize.str() +
       ", " + std::to_string(s.pixels) + " pixels per channel\n\n";
  o += "channel  mean      std\n";
  for (int c = 0; c < s.channels; ++c)
    o += pad_right(std::to_string(c), 9) + fixed(s.mean[size_t(c)], 6) + "  " + fixed(s.stddev[size_t(c)], 6) + "\n";
  if (!s.skipped.empty())
    o += "skipped " + std::to_string(s.skipped.size()) + " unreadable image" + (s.skipped.size() > 1 ? "s" : "") +
         " (--skip-bad), first: " + s.skipped[0].reason + "\n";
  o += "\ntrainer flags: --mean " + format_flag_values(s.mean) + " --std " + format_flag_values(s.stddev) + "\n\n";

  size_t w = 5;
  for (const std::string& n : s.class_names) w = std::max(w, std::min<size_t>(n.size(), 40));
  const bool sampled = s.used < s.samples;
  o += "label  " + pad_right("class", w) + "  " + pad_left("count", 8) + "  " + pad_left("share", 7) +
       (sampled ? "  " + pad_left("used", 8) : "") + "\n";
  for (size_t k = 0; k < s.class_names.size(); ++k)
    o += pad_right(std::to_string(k), 7) + pad_right(s.class_names[k], w) + "  " +
         pad_left(std::to_string(s.counts[k]), 8) + "  " +
         pad_left(fixed(100.0 * double(s.counts[k]) / double(s.samples), 2) + "%", 7) +
         (sampled ? "  " + pad_left(std::to_string(s.used_counts[k]), 8) : "") + "\n";
  o += pad_right("total", 7 + w) + "  " + pad_left(std::to_string(s.samples), 8) + "  " + pad_left("100.00%", 7) +
       (sampled ? "  " + pad_left(std::to_string(s.used), 8) : "") + "\n";
  return o;
}

std::string stats_json(const DatasetStats& s) {
  auto list = [](const std::vector<double>& v) {
    std::string o = "[";
    for (size_t i = 0; i < v.size(); ++i) o += (i ? ", " : "") + json_number(v[i]);
    return o + "]";
  };
  std::string o = "{\n";
  o += "  \"dataset\": " + json_string(s.source) + ",\n";
  o += "  \"samples\": " + std::to_string(s.samples) + ",\n";
  o += "  \"images_used\": " + std::to_string(s.used) + ",\n";
  o += "  \"images_skipped\": " + std::to_string(s.skipped.size()) + ",\n";
  o += "  \"seed\": " + std::to_string(s.seed) + ",\n";
  o += "  \"resize\": " + json_string(s.resize.str()) + ",\n";
  o += "  \"channels\": " + std::to_string(s.channels) + ",\n";
  o += "  \"pixels_per_channel\": " + std::to_string(s.pixels) + ",\n";
  o += "  \"mean\": " + list(s.mean) + ",\n";
  o += "  \"std\": " + list(s.stddev) + ",\n";
  o += "  \"mean_flag\": " + json_string(format_flag_values(s.mean)) + ",\n";
  o += "  \"std_flag\": " + json_string(format_flag_values(s.stddev)) + ",\n";
  o += "  \"classes\": [";
  for (size_t k = 0; k < s.class_names.size(); ++k)
    o += std::string(k ? "," : "") + "\n    {\"label\": " + std::to_string(k) + ", \"name\": " +
         json_string(s.class_names[k]) + ", \"count\": " + std::to_string(s.counts[k]) +
         ", \"used\": " + std::to_string(s.used_counts[k]) + "}";
  o += "\n  ]\n}\n";
  return o;
}

}  // namespace mpicnn::data
