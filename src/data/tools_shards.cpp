// The data tools' shard commands (tools.h): pack a dataset into tar shards with their index,
// unpack shards into an image folder, inspect (read every shard, check the index).
#include <algorithm>
#include <filesystem>

#include "core/check.h"
#include "core/text.h"
#include "data/image.h"
#include "data/loader.h"
#include "data/shards.h"
#include "data/tools.h"
#include "io/atomic_file.h"

namespace fs = std::filesystem;

namespace mpicnn::data {

namespace {

constexpr size_t kPackBlock = 256;  // samples read in parallel before they are written in order

// A sample's image as the shard carries it: an image file's own bytes (its extension), or the
// pixels of a fixed-size dataset as PNG.
struct Encoded {
  std::vector<uint8_t> bytes;
  std::string ext;
};

Encoded encode_sample(const Dataset& ds, size_t i) {
  if (ds.height() > 0) return {encode_png(ds.load(i, 0), ds.source(i)), "png"};
  const std::string ext = lower(fs::path(ds.source(i)).extension().string());
  CHECK(ext == ".jpg" || ext == ".jpeg" || ext == ".png" || ext == ".bmp", ds.source(i),
        ": shards carry .jpg, .jpeg, .png or .bmp images");
  return {ds.read(i), ext.substr(1)};
}

// The output folder's earlier shard files and index (for --force).
std::vector<std::string> shard_outputs(const std::string& dir) {
  std::vector<std::string> out = {kShardIndexName};
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".tar") out.push_back(it->path().filename().string());
  return out;
}

}  // namespace

std::vector<PackedSplit> pack_shards(const std::vector<std::pair<std::string, const Dataset*>>& splits,
                                     const PackOptions& opt) {
  CHECK(!splits.empty(), "pack_shards: no splits to pack");
  CHECK(opt.shard_bytes >= 1024, "--shard-mb: shards must be allowed at least 1 KiB");
  const std::vector<std::string>& names = splits[0].second->class_names();
  for (const auto& [split, ds] : splits) {
    CHECK(ds->class_names() == names, ds->describe(), ": classes differ from ", splits[0].second->describe());
    CHECK(ds->size() > 0, ds->describe(), ": no samples");
  }
  prepare_output_folder(opt.output, opt.force, "shards", shard_outputs(opt.output));
  std::vector<PackedSplit> report;
  nlohmann::json index_splits = nlohmann::json::object();
  for (const auto& [split, ds] : splits) {
    PackedSplit r;
    r.split = split;
    r.source = ds->describe();
    // The training split in a seeded random order, so that every shard mixes the classes (a
    // stream shuffles only within its buffer); the others in dataset order.
    std::vector<uint64_t> order = split == "train" ? shuffled_order(ds->size(), opt.seed, 0) : std::vector<uint64_t>();
    if (order.empty())
      for (size_t i = 0; i < ds->size(); ++i) order.push_back(i);
    const int width = std::max<int>(6, int(std::to_string(ds->size()).size()));
    std::unique_ptr<ShardWriter> w;
    nlohmann::json files = nlohmann::json::array();
    auto finish = [&] {
      if (!w) return;
      w->close();
      files.push_back({{"file", fs::path(r.files.back()).filename().string()}, {"samples", w->samples()}});
      r.bytes += w->bytes();
      w.reset();
    };
    std::vector<Encoded> block;
    for (size_t lo = 0; lo < order.size(); lo += kPackBlock) {
      const size_t n = std::min(kPackBlock, order.size() - lo);
      block.assign(n, {});
      parallel_for(n, resolve_threads(opt.threads), [&](size_t j, int) { block[j] = encode_sample(*ds, order[lo + j]); });
      for (size_t j = 0; j < n; ++j) {
        const uint64_t k = lo + j;
        const uint64_t size = 1024 + (block[j].bytes.size() + 511) / 512 * 512;
        if (w && w->samples() > 0 &&
            (w->bytes() + size > opt.shard_bytes || (opt.shard_samples > 0 && w->samples() >= opt.shard_samples)))
          finish();
        if (!w) {
          r.files.push_back((fs::path(opt.output) / (split + "-" + zero_pad(r.files.size(), 6) + ".tar")).string());
          w = std::make_unique<ShardWriter>(r.files.back());
        }
        w->add(zero_pad(k, width), block[j].ext, block[j].bytes, ds->label(size_t(order[k])));
        ++r.samples;
      }
    }
    finish();
    index_splits[split] = files;
    report.push_back(std::move(r));
  }
  const nlohmann::json index = {{"format", "webdataset"},
                                {"written_by", "mpicnn data_tools shards pack"},
                                {"classes", names},
                                {"splits", index_splits}};
  const std::string text = index.dump(1) + "\n";
  write_file_atomic((fs::path(opt.output) / kShardIndexName).string(),
                    std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  return report;
}

std::string format_packed(const std::vector<PackedSplit>& r) {
  std::string o;
  for (const PackedSplit& s : r)
    o += detail::concat(s.split, ": ", s.source, "\n  ", s.samples, " samples in ", s.files.size(), " shard",
                        s.files.size() == 1 ? "" : "s", " (", (s.bytes + (1 << 19)) >> 20, " MiB): ",
                        s.files.empty() ? "" : fs::path(s.files.front()).filename().string(),
                        s.files.size() > 1 ? " .. " + fs::path(s.files.back()).filename().string() : "", "\n");
  return o;
}

std::vector<ShardCheck> inspect_shards(const ShardSet& set) {
  std::vector<ShardCheck> out;
  for (const ShardFile& f : set.shards) {
    ShardCheck c;
    c.path = f.path;
    c.indexed = f.samples;
    c.per_class.assign(set.class_names.size(), 0);
    ShardReader r(f.path, int(set.class_names.size()));
    for (ShardSample s; r.next(s);) {
      if (c.samples == 0) c.first_key = s.key;
      ++c.samples;
      ++c.per_class[size_t(s.label)];
      c.bytes += s.image.size();
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<size_t> unpack_shards(const std::vector<std::pair<std::string, const ShardSet*>>& splits,
                                  const UnpackOptions& opt) {
  CHECK(!splits.empty(), "unpack_shards: no splits");
  const std::vector<std::string>& names = splits[0].second->class_names;
  std::vector<std::string> outputs;
  for (const auto& [split, set] : splits) {
    CHECK(set->class_names == names, set->name, ": classes differ from ", splits[0].second->name);
    outputs.push_back(split);
  }
  prepare_output_folder(opt.output, opt.force, "shards", outputs);
  const std::vector<std::string> folders = class_folder_names(names);
  std::vector<size_t> written;
  std::error_code ec;
  for (const auto& [split, set] : splits) {
    const fs::path root = fs::path(opt.output) / split;
    for (const std::string& f : folders) {
      fs::create_directories(root / f, ec);
      CHECK(!ec, (root / f).string(), ": cannot create (", ec.message(), ")");
    }
    size_t n = 0;
    for (const ShardFile& f : set->shards) {
      ShardReader r(f.path, int(names.size()));
      for (ShardSample s; r.next(s); ++n) {
        std::string file = s.key;
        std::replace(file.begin(), file.end(), '/', '_');
        write_file_atomic((root / folders[size_t(s.label)] / (file + "." + s.image_ext)).string(), s.image);
      }
    }
    written.push_back(n);
  }
  return written;
}

}  // namespace mpicnn::data
