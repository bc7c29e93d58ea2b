// CSV image lists (path,label[,split]) and the RFC-4180 parser behind them.
// Not an image check: a path that exists but does not decode fails when loaded.
#include "data/csv_dataset.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <set>

#include "core/check.h"

namespace fs = std::filesystem;

namespace mpicnn::data {

namespace {

// Without a classes.txt the classes are "0" .. the largest label, so a label bounds how many
// names are made: 2000000000 in a 30-byte file meant 2e9 strings (found by tests/fuzz). Far
// above any classification dataset's count (ImageNet-21k has 21841).
constexpr int kMaxUnnamedClasses = 100000;

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return std::string(s);
}

std::vector<std::string> read_class_names(const std::string& file) {
  const std::vector<uint8_t> bytes = read_file_bytes(file);
  std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  std::vector<std::string> names;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    names.emplace_back(line);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
  }
  while (!names.empty() && names.back().empty()) names.pop_back();
  CHECK(!names.empty(), file, ": no class names");
  for (size_t k = 0; k < names.size(); ++k) CHECK(!names[k].empty(), file, " line ", k + 1, ": empty class name");
  return names;
}

}  // namespace

std::vector<CsvRecord> parse_csv(std::string_view text, const std::string& name) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  std::vector<CsvRecord> out;
  size_t line = 1, i = 0;
  const size_t n = text.size();
  while (i < n) {
    CsvRecord rec;
    rec.line = line;
    std::string field;
    bool done = false;
    while (!done) {
      if (i < n && text[i] == '"') {
        const size_t start_line = line;
        ++i;
        for (;;) {
          CHECK(i < n, name, " line ", start_line, ": unterminated quoted field");
          if (text[i] == '"') {
            if (i + 1 < n && text[i + 1] == '"') {
              field += '"';
              i += 2;
              continue;
            }
            ++i;
            break;
          }
          if (text[i] == '\n') ++line;
          field += text[i++];
        }
        CHECK(i == n || text[i] == ',' || text[i] == '\n' || text[i] == '\r', name, " line ", line,
              ": text after a closing quote");
      } else {
        while (i < n && text[i] != ',' && text[i] != '\n' && text[i] != '\r') field += text[i++];
      }
      rec.fields.push_back(std::move(field));
      field.clear();
      if (i < n && text[i] == ',') {
        ++i;
        continue;
      }
      // End of record: CRLF, LF, a lone CR, or the end of the text.
      if (i < n && text[i] == '\r') ++i;
      if (i < n && text[i] == '\n') ++i;
      ++line;
      done = true;
    }
    if (rec.fields.size() == 1 && rec.fields[0].empty()) continue;  // empty line
    out.push_back(std::move(rec));
  }
  return out;
}

FileListData read_csv_dataset(const std::string& csv_path, const std::string& split, bool check_files) {
  std::error_code ec;
  CHECK(fs::is_regular_file(csv_path, ec), csv_path, ": no such file");
  const std::vector<uint8_t> bytes = read_file_bytes(csv_path);
  const std::vector<CsvRecord> recs =
      parse_csv(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), csv_path);
  CHECK(!recs.empty(), csv_path, ": empty file (expected a header path,label[,split])");

  const std::vector<std::string>& header = recs[0].fields;
  int col_path = -1, col_label = -1, col_split = -1;
  for (size_t c = 0; c < header.size(); ++c) {
    const std::string h = trim(header[c]);
    int* col = h == "path" ? &col_path : h == "label" ? &col_label : h == "split" ? &col_split : nullptr;
    if (!col) continue;
    CHECK(*col < 0, csv_path, " line ", recs[0].line, ": column '", h, "' appears twice");
    *col = int(c);
  }
  CHECK(col_path >= 0 && col_label >= 0, csv_path, " line ", recs[0].line,
        ": header must name the columns path and label (and optionally split)");
  CHECK(recs.size() > 1, csv_path, ": no rows after the header");

  const fs::path dir = fs::path(csv_path).parent_path();
  const fs::path classes_file = dir / "classes.txt";
  std::vector<std::string> class_names;
  if (fs::is_regular_file(classes_file, ec)) class_names = read_class_names(classes_file.string());

  FileListData d;
  d.name = csv_path;
  std::vector<size_t> lines;
  std::set<std::string> splits_seen;
  int max_label = -1;
  for (size_t r = 1; r < recs.size(); ++r) {
    const CsvRecord& rec = recs[r];
    CHECK(rec.fields.size() == header.size(), csv_path, " line ", rec.line, ": ", rec.fields.size(),
          " fields, expected ", header.size(), " as in the header");
    const std::string& path = rec.fields[size_t(col_path)];
    CHECK(!path.empty(), csv_path, " line ", rec.line, ": empty path");
    const std::string ltext = trim(rec.fields[size_t(col_label)]);
    int label = -1;
    const auto [end, err] = std::from_chars(ltext.data(), ltext.data() + ltext.size(), label);
    CHECK(err == std::errc() && end == ltext.data() + ltext.size() && !ltext.empty() && label >= 0,
          csv_path, " line ", rec.line, ": label '", ltext, "' is not a class index (an integer >= 0)");
    CHECK(class_names.empty() || label < int(class_names.size()), csv_path, " line ", rec.line, ": label ",
          label, " is outside the ", class_names.size(), " classes of ", classes_file.string());
    CHECK(!class_names.empty() || label < kMaxUnnamedClasses, csv_path, " line ", rec.line, ": label ",
          label, " is too large: without a classes.txt beside the CSV labels must be below ",
          kMaxUnnamedClasses);
    // Every row counts for the number of classes, so train and test rows agree on it.
    max_label = std::max(max_label, label);
    if (col_split >= 0) {
      const std::string s = trim(rec.fields[size_t(col_split)]);
      splits_seen.insert(s);
      if (split != "all" && s != split) continue;
    }
    const fs::path p(path);
    d.paths.push_back((p.is_absolute() ? p : dir / p).string());
    d.labels.push_back(label);
    lines.push_back(rec.line);
  }
  if (col_split < 0) {
    CHECK(split == "train" || split == "all", csv_path, ": has no split column, so it holds one split only and "
          "there is no ", split, " split (ask for split 'all' to read every row)");
  }
  if (d.paths.empty()) {
    std::string present;
    for (const std::string& s : splits_seen) present += (present.empty() ? "" : ", ") + ("'" + s + "'");
    FAIL(csv_path, ": no rows with split '", split, "' (splits present: ", present, ")");
  }
  if (class_names.empty())
    for (int k = 0; k <= max_label; ++k) class_names.push_back(std::to_string(k));
  d.class_names = std::move(class_names);
  if (check_files)
    for (size_t i = 0; i < d.paths.size(); ++i)
      CHECK(fs::is_regular_file(d.paths[i], ec), csv_path, " line ", lines[i], ": missing image file ", d.paths[i]);
  return d;
}

}  // namespace mpicnn::data
