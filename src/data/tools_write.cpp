// Data tools, part 2: the writers. create_dataset (stratified sample -> CSV dataframes, with
// PNG copies where needed) and export_images (in-memory datasets -> PNG image folders).
// Not the sampling or the shared pieces (tools.cpp) and not the readers (csv_dataset, image_folder).
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/check.h"
#include "core/text.h"
#include "data/tools.h"
#include "io/atomic_file.h"

namespace fs = std::filesystem;

namespace mpicnn::data {

namespace {

// Digits of n - 1: file names padded to it sort in index order (the image-folder scan sorts).
int index_width(size_t n) { return int(std::to_string(n > 0 ? n - 1 : 0).size()); }

void write_text_atomic(const fs::path& path, const std::string& text) {
  write_file_atomic(path.string(),
                    std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

// A file name part from an original file's stem: kept readable, without what breaks a path.
std::string safe_stem(const std::string& stem) {
  std::string s = stem;
  for (char& c : s)
    if (c == '/' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '_';
  return s;
}

// Path of `file` as the CSV in `out` (canonical) should name it: relative when the two share a
// folder below the root (so the output and its images can move together), else absolute.
// Only the file's folder is resolved: a symlinked image keeps its own name.
std::string csv_path_of(const std::string& file, const fs::path& out, bool absolute) {
  std::error_code ec;
  const fs::path p = fs::absolute(file, ec);
  const fs::path dir = fs::canonical(p.parent_path(), ec);
  CHECK(!ec && fs::is_regular_file(p, ec), file, ": missing image file");
  const fs::path real = dir / p.filename();
  if (absolute) return real.string();
  auto a = real.begin(), b = out.begin();
  int common = 0;
  while (a != real.end() && b != out.end() && *a == *b) ++a, ++b, ++common;
  return common >= 2 ? real.lexically_relative(out).string() : real.string();
}

}  // namespace

// ---- create_dataset ---------------------------------------------------------------------------

namespace {

// The number of samples to draw, after checking the options against the dataset (and that its
// class names can be written to classes.txt).
size_t sample_size(const Dataset& ds, const CreateOptions& opt) {
  const size_t n = ds.size();
  CHECK(n > 0, ds.describe(), ": no samples");
  CHECK(opt.size > 0 || (opt.fraction > 0 && opt.fraction <= 1), "--fraction: ", opt.fraction,
        " is outside (0, 1]");
  CHECK(opt.size <= n, "--size: ", opt.size, " is more than the ", n, " samples of ", ds.describe());
  const size_t size = opt.size > 0 ? opt.size : size_t(std::llround(opt.fraction * double(n)));
  CHECK(size > 0, "--fraction: ", opt.fraction, " of ", n, " samples selects none");
  CHECK(opt.test_fraction >= 0 && opt.test_fraction <= 1, "--test-fraction: ", opt.test_fraction,
        " is outside [0, 1]");
  for (const std::string& name : ds.class_names())
    CHECK(!name.empty() && name.find_first_of("\r\n") == std::string::npos, ds.describe(),
          ": class name '", name, "' cannot be written to classes.txt (empty or with a line break)");
  return size;
}

// The selected samples in dataset order, each with the path its CSV row will name.
struct Selection {
  std::vector<uint64_t> samples;      // dataset indices, ascending
  std::vector<std::string> paths;     // (samples)
  std::vector<SkippedImage> skipped;  // skip_bad: left out, in dataset order
};

// Writes the selected samples as PNGs out/images/<class folder>/<index>[_<stem>].png (resized
// when asked) and names them in sel.paths. With skip_bad an unreadable sample leaves the
// selection and the split (so no CSV names it); without, its error stops the run.
void write_sample_images(const Dataset& ds, const CreateOptions& opt, const fs::path& out,
                         bool file_source, const std::vector<int32_t>& labels, Selection& sel,
                         StratifiedSplit& split) {
  std::vector<uint64_t>& all = sel.samples;
  const std::vector<std::string> folders = class_folder_names(ds.class_names());
  const int width = index_width(ds.size());
  std::vector<bool> used(folders.size(), false);
  for (uint64_t i : all) used[size_t(labels[i])] = true;
  std::error_code ec;
  for (size_t k = 0; k < folders.size(); ++k)
    if (used[k]) {
      fs::create_directories(out / "images" / folders[k], ec);
      CHECK(!ec, (out / "images" / folders[k]).string(), ": cannot create (", ec.message(), ")");
    }
  for (size_t j = 0; j < all.size(); ++j) {
    const uint64_t i = all[j];
    std::string file = zero_pad(i, width);
    if (file_source) file.append("_").append(safe_stem(fs::path(ds.source(i)).stem().string()));
    const fs::path rel = fs::path("images") / folders[size_t(labels[i])] / (file + ".png");
    sel.paths[j] = opt.absolute_paths ? (out / rel).string() : rel.string();
  }
  // Each file is a pure function of its sample, so the thread count changes nothing written.
  std::vector<std::string> bad(all.size());  // (all): why, if the source is unreadable
  parallel_for(all.size(), writer_threads(opt.threads), [&](size_t j, int) {
    const fs::path file = opt.absolute_paths ? fs::path(sel.paths[j]) : out / sel.paths[j];
    Image img;
    try {
      img = opt.resize.apply(ds.load(all[j], 0));
    } catch (const Error& e) {
      if (!opt.skip_bad) throw;
      bad[j] = e.message();
      return;
    }
    write_png(file.string(), img);
  });
  // Unreadable samples leave the sample (and so the CSVs) altogether.
  std::vector<uint64_t> kept;
  for (size_t j = 0; j < all.size(); ++j) {
    if (bad[j].empty()) kept.push_back(all[j]), sel.paths[kept.size() - 1] = sel.paths[j];
    else sel.skipped.push_back({ds.source(all[j]), bad[j]});
  }
  if (sel.skipped.empty()) return;
  sel.paths.resize(kept.size());
  auto drop = [&](std::vector<uint64_t>& v) {
    std::erase_if(v, [&](uint64_t i) { return !std::binary_search(kept.begin(), kept.end(), i); });
  };
  drop(split.train);
  drop(split.test);
  all = std::move(kept);
  CHECK(!all.empty(), ds.describe(), ": none of the selected images could be read");
}

// classes.txt, then train.csv and test.csv (or data.csv with a split column), each atomically.
// Returns the files written.
std::vector<std::string> write_dataframes(const fs::path& out, const CreateOptions& opt,
                                          const std::vector<std::string>& names,
                                          const std::vector<int32_t>& labels, const Selection& sel,
                                          const StratifiedSplit& split) {
  std::vector<std::string> files;
  std::string classes;
  for (const std::string& name : names) classes += name + "\n";
  write_text_atomic(out / "classes.txt", classes);
  files.push_back((out / "classes.txt").string());
  const std::vector<uint64_t>& all = sel.samples;
  auto row = [&](size_t j) { return csv_field(sel.paths[j]) + "," + std::to_string(labels[all[j]]); };
  std::vector<bool> is_test(all.size(), false);
  for (size_t j = 0; j < all.size(); ++j)
    is_test[j] = std::binary_search(split.test.begin(), split.test.end(), all[j]);
  if (opt.single_csv) {
    std::string csv = "path,label,split\n";
    for (size_t j = 0; j < all.size(); ++j) csv += row(j) + (is_test[j] ? ",test\n" : ",train\n");
    write_text_atomic(out / "data.csv", csv);
    files.push_back((out / "data.csv").string());
    return files;
  }
  // An empty part gets no file: the CSV reader rejects a header without rows.
  for (const bool test : {false, true}) {
    if ((test ? split.test : split.train).empty()) continue;
    std::string csv = "path,label\n";
    for (size_t j = 0; j < all.size(); ++j)
      if (is_test[j] == test) csv += row(j) + "\n";
    const fs::path file = out / (test ? "test.csv" : "train.csv");
    write_text_atomic(file, csv);
    files.push_back(file.string());
  }
  return files;
}

}  // namespace

CreateReport create_dataset(const Dataset& ds, const CreateOptions& opt) {
  const size_t size = sample_size(ds, opt);
  // File sources keep their files unless resized; in-memory samples need files to be named.
  const bool file_source = dynamic_cast<const FileListDataset*>(&ds) != nullptr;
  const bool write_images = !file_source || opt.resize.active();

  const std::vector<int32_t> labels = dataset_labels(ds);
  StratifiedSplit split = stratified_split(labels, ds.num_classes(), size, opt.test_fraction, opt.seed);
  // CSVs before images/: removing an earlier run never leaves a CSV naming removed images.
  prepare_output_folder(opt.output, opt.force, "create_dataset",
                        {"train.csv", "test.csv", "data.csv", "classes.txt", "images"});
  std::error_code ec;
  const fs::path out = fs::canonical(opt.output, ec);
  CHECK(!ec, opt.output, ": cannot resolve the output folder (", ec.message(), ")");

  Selection sel;
  sel.samples = split.train;
  sel.samples.insert(sel.samples.end(), split.test.begin(), split.test.end());
  std::sort(sel.samples.begin(), sel.samples.end());
  sel.paths.resize(sel.samples.size());
  if (write_images) {
    write_sample_images(ds, opt, out, file_source, labels, sel, split);
  } else {
    for (size_t j = 0; j < sel.samples.size(); ++j)
      sel.paths[j] = csv_path_of(ds.source(sel.samples[j]), out, opt.absolute_paths);
  }

  CreateReport r;
  r.skipped = sel.skipped;
  r.source = ds.describe();
  r.output = out.string();
  r.class_names = ds.class_names();
  r.available = count_labels(labels, ds.num_classes());
  r.train.assign(r.class_names.size(), 0);
  r.test.assign(r.class_names.size(), 0);
  for (uint64_t i : split.train) ++r.train[size_t(labels[i])];
  for (uint64_t i : split.test) ++r.test[size_t(labels[i])];
  r.images_written = write_images ? sel.samples.size() : 0;
  r.files = write_dataframes(out, opt, r.class_names, labels, sel, split);
  return r;
}

namespace {

std::string pad_right(std::string s, size_t w) { return s.size() < w ? s + std::string(w - s.size(), ' ') : s; }
std::string pad_left(std::string s, size_t w) { return s.size() < w ? std::string(w - s.size(), ' ') + s : s; }

}  // namespace

std::string format_report(const CreateReport& r) {
  size_t w = 5;
  for (const std::string& s : r.class_names) w = std::max(w, std::min<size_t>(s.size(), 40));
  size_t train = 0, test = 0, avail = 0;
  std::string o = "source: " + r.source + "\n\nlabel  " + pad_right("class", w) + "  " + pad_left("source", 9) +
                  "  " + pad_left("train", 8) + "  " + pad_left("test", 8) + "\n";
  for (size_t k = 0; k < r.class_names.size(); ++k) {
    o += pad_right(std::to_string(k), 7) + pad_right(r.class_names[k], w) + "  " +
         pad_left(std::to_string(r.available[k]), 9) + "  " + pad_left(std::to_string(r.train[k]), 8) + "  " +
         pad_left(std::to_string(r.test[k]), 8) + "\n";
    train += r.train[k], test += r.test[k], avail += r.available[k];
  }
  o += pad_right("total", 7 + w) + "  " + pad_left(std::to_string(avail), 9) + "  " +
       pad_left(std::to_string(train), 8) + "  " + pad_left(std::to_string(test), 8) + "\n\n";
  for (size_t k = 0; k < r.class_names.size(); ++k)
    if (r.train[k] + r.test[k] > 0 && (r.train[k] == 0 || r.test[k] == 0) && test > 0 && train > 0)
      o += "note: class " + std::to_string(k) + " (" + r.class_names[k] + ") has no " +
           (r.train[k] == 0 ? "train" : "test") + " samples\n";
  o += "wrote";
  for (const std::string& f : r.files) o += " " + f;
  if (r.images_written) o += " and " + std::to_string(r.images_written) + " images under " + r.output + "/images";
  o += "\n";
  if (!r.skipped.empty())
    o += "skipped " + std::to_string(r.skipped.size()) + " unreadable image" + (r.skipped.size() > 1 ? "s" : "") +
         " (--skip-bad), first: " + r.skipped[0].reason + "\n";
  return o;
}

// ---- export_images ----------------------------------------------------------------------------

std::vector<ExportedSplit> export_images(const std::vector<std::pair<std::string, const Dataset*>>& splits,
                                         const ExportOptions& opt) {
  CHECK(!splits.empty(), "export_images: no splits to export");
  const std::vector<std::string>& names = splits[0].second->class_names();
  std::vector<std::string> outputs;
  for (const auto& [split, ds] : splits) {
    CHECK(ds->class_names() == names, ds->describe(), ": classes differ from ", splits[0].second->describe());
    CHECK(ds->size() > 0, ds->describe(), ": no samples");
    outputs.push_back(split);
  }
  const std::vector<std::string> folders = class_folder_names(names);

  // Checked before anything is written: a class with no image would be missing from the image
  // folder, and the scan would then number the classes after it differently.
  std::vector<ExportedSplit> report;
  for (const auto& [split, ds] : splits) {
    ExportedSplit e;
    e.split = split;
    e.source = ds->describe();
    e.images = opt.limit > 0 ? std::min(opt.limit, ds->size()) : ds->size();
    e.per_class.assign(names.size(), 0);
    for (size_t i = 0; i < e.images; ++i) ++e.per_class[size_t(ds->label(i))];
    for (size_t k = 0; k < names.size(); ++k)
      CHECK(e.per_class[k] > 0, split, ": class ", k, " (", names[k], ") has no sample among the first ", e.images,
            opt.limit > 0 ? " (raise --limit)" : "", "; the image folder would read back with other labels");
    report.push_back(std::move(e));
  }

  prepare_output_folder(opt.output, opt.force, "export_images", outputs);
  std::error_code ec;
  for (size_t s = 0; s < splits.size(); ++s) {
    const Dataset& ds = *splits[s].second;
    ExportedSplit& e = report[s];
    const fs::path root = fs::path(opt.output) / e.split;
    e.folder = root.string();
    for (const std::string& f : folders) {
      fs::create_directories(root / f, ec);
      CHECK(!ec, (root / f).string(), ": cannot create (", ec.message(), ")");
    }
    const int width = index_width(e.images);
    parallel_for(e.images, writer_threads(opt.threads), [&](size_t i, int) {
      const fs::path file = root / folders[size_t(ds.label(i))] / (zero_pad(i, width) + ".png");
      write_png(file.string(), ds.load(i, 0));
    });
  }
  return report;
}

std::string format_export(const std::vector<ExportedSplit>& r, const std::vector<std::string>& class_names) {
  const std::vector<std::string> folders = class_folder_names(class_names);
  size_t w = 6;
  for (const std::string& f : folders) w = std::max(w, std::min<size_t>(f.size(), 40));
  std::string o;
  for (const ExportedSplit& e : r) o += e.split + ": " + e.source + "\n";
  o += "\nlabel  " + pad_right("folder", w);
  for (const ExportedSplit& e : r) o += "  " + pad_left(e.split, 8);
  o += "\n";
  for (size_t k = 0; k < folders.size(); ++k) {
    o += pad_right(std::to_string(k), 7) + pad_right(folders[k], w);
    for (const ExportedSplit& e : r) o += "  " + pad_left(std::to_string(e.per_class[k]), 8);
    o += "\n";
  }
  o += pad_right("total", 7 + w);
  for (const ExportedSplit& e : r) o += "  " + pad_left(std::to_string(e.images), 8);
  o += "\n\nwrote";
  for (const ExportedSplit& e : r) o += " " + e.folder + "/";
  return o + "\n";
}

}  // namespace mpicnn::data
