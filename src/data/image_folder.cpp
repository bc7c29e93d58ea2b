// Image folder scanning (torchvision ImageFolder / DatasetFolder.make_dataset order).
// Not a file-format check: a file with an image extension that does not decode fails at load.
#include "data/image_folder.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>
#include <utility>

#include "core/check.h"

namespace fs = std::filesystem;

namespace mpicnn::data {

namespace {

bool hidden(const fs::path& p) { return p.filename().string().starts_with('.'); }

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);  // follows symlinks
}

// Visible subfolders of `dir`, sorted by name.
std::vector<std::string> subfolders(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (!hidden(it->path()) && is_dir(it->path())) out.push_back(it->path().filename().string());
  CHECK(!ec, dir.string(), ": cannot list (", ec.message(), ")");
  std::sort(out.begin(), out.end());
  return out;
}

// torchvision walks each class folder with sorted(os.walk(followlinks=True)) and takes each
// folder's files sorted: folders in path order, then files by name. That is not the same as
// sorting full paths ("c/z.png" comes before "c/a/b.png"), and the index order matters for
// matching PyTorch's sample indices.
void walk(const fs::path& dir, std::set<fs::path>& seen, std::vector<std::pair<std::string, std::vector<std::string>>>& out) {
  std::error_code ec;
  const fs::path real = fs::canonical(dir, ec);
  if (ec || !seen.insert(real).second) return;  // a symlink cycle: visit each folder once
  std::vector<std::string> files;
  std::vector<fs::path> dirs;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    if (hidden(p)) continue;
    if (is_dir(p))
      dirs.push_back(p);
    else if (has_image_extension(p.filename().string()))
      files.push_back(p.filename().string());
  }
  CHECK(!ec, dir.string(), ": cannot list (", ec.message(), ")");
  std::sort(files.begin(), files.end());
  out.emplace_back(dir.string(), std::move(files));
  std::sort(dirs.begin(), dirs.end());
  for (const fs::path& d : dirs) walk(d, seen, out);
}

std::string first_difference(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  for (const std::string& x : a)
    if (!std::binary_search(b.begin(), b.end(), x)) return x;
  return "";
}

}  // namespace

bool has_image_extension(const std::string& filename) {
  std::string lower = filename;
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  for (const char* ext : {".jpg", ".jpeg", ".png", ".bmp"})
    if (lower.ends_with(ext)) return true;
  return false;
}

FileListData scan_image_folder(const std::string& root, const std::string& split) {
  CHECK(is_dir(root), root, ": no such folder");
  const fs::path r(root);
  fs::path class_root = r;
  const bool has_train = is_dir(r / "train"), has_test = is_dir(r / "test"), has_val = is_dir(r / "val");
  if (split != "all") {
    CHECK(split == "train" || split == "test" || split == "val", root, ": unknown split '", split,
          "' (train, test, val or all)");
    if (has_train || has_test) {
      const char* other = split == "val" ? "test" : "val";
      const std::string own = split;
      if (is_dir(r / own))
        class_root = r / own;
      else if (split != "train" && is_dir(r / other))
        class_root = r / other;
      else
        FAIL(root, ": has no ", own, "/ folder", split == "train" ? "" : std::string(" (nor ") + other + "/)",
             ", so there is no ", split, " split");
      // Train and test must index the same classes, or labels would mean different things.
      const fs::path eval = has_test ? r / "test" : r / "val";
      if (has_train && (has_test || has_val)) {
        const std::vector<std::string> a = subfolders(r / "train"), b = subfolders(eval);
        if (a != b) {
          std::string x = first_difference(a, b), where = (r / "train").string();
          if (x.empty()) x = first_difference(b, a), where = eval.string();
          FAIL(root, ": train/ and ", eval.filename().string(), "/ have different class folders (",
               x.empty() ? "?" : x, " is only in ", where, ")");
        }
      }
    } else {
      CHECK(split == "train", root, ": has no train/ and test/ folders, so it holds one split only and there is no ",
            split, " split (ask for split 'train' or 'all' to read it)");
    }
  }

  FileListData d;
  d.name = class_root.string();
  d.class_names = subfolders(class_root);
  CHECK(!d.class_names.empty(), class_root.string(), ": no class folders (expected one subfolder per class)");
  for (size_t k = 0; k < d.class_names.size(); ++k) {
    const fs::path cdir = class_root / d.class_names[k];
    std::set<fs::path> seen;
    std::vector<std::pair<std::string, std::vector<std::string>>> folders;
    walk(cdir, seen, folders);
    std::sort(folders.begin(), folders.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    const size_t before = d.paths.size();
    for (const auto& [dir, files] : folders)
      for (const std::string& f : files) {
        d.paths.push_back((fs::path(dir) / f).string());
        d.labels.push_back(int32_t(k));
      }
    CHECK(d.paths.size() > before, cdir.string(), ": empty class folder (no .jpg, .jpeg, .png or .bmp files)");
  }
  return d;
}

}  // namespace mpicnn::data
