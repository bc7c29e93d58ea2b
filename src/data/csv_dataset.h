// CSV dataframes of images: a header with `path` and `label` columns (and optionally `split`),
// one image per row, read into a FileListData. Includes the small RFC-4180 parser it uses.
// Not a general CSV library: no type inference, no other delimiters.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "data/dataset.h"

namespace mpicnn::data {

struct CsvRecord {
  size_t line = 0;  // 1-based line the record starts on
  std::vector<std::string> fields;
};

// RFC-4180: comma separated, "quoted" fields may hold commas, newlines and "" for a quote;
// CRLF or LF line ends; a UTF-8 byte-order mark and empty lines are skipped. An unterminated
// quote or text after a closing quote is an Error naming `name` and the line.
std::vector<CsvRecord> parse_csv(std::string_view text, const std::string& name);

// Columns are found by name in the header (other columns are ignored). Paths are relative to
// the CSV's folder unless absolute. Labels are class indices >= 0; classes.txt next to the CSV
// (one name per line) names them and bounds them, else the names are "0" .. max label (labels
// below 100000). With a split column, `split` selects the rows whose split equals it ("all":
// every row); without one the file is a single split, returned for "train" and "all". Errors
// name the file and line; check_files also stats every image up front.
FileListData read_csv_dataset(const std::string& csv_path, const std::string& split, bool check_files);

}  // namespace mpicnn::data
