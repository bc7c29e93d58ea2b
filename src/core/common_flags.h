// The flags ./train and ./pipeline_eval both take, declared once: name, short name, metavar, help
// and conversion (ranges and accepted values), so the two programs cannot drift apart. Each
// program binds a row to a field of its own options struct (cli::Flag's shared constructor);
// `help_suffix` adds what is true of that program only. Not the programs' tables.
#pragma once
#include <string>
#include <vector>

#include "core/cli.h"

namespace mpicnn::cli::common {

Shared<std::string> data(const std::string& help_suffix = "");
Shared<bool> skip_bad(const std::string& help_suffix = "");
Shared<std::vector<float>> mean(const std::string& help_suffix = "");
Shared<std::vector<float>> stddev(const std::string& help_suffix = "");  // --std
Shared<int> threads(const std::string& help_suffix = "");
Shared<double> timeout(const std::string& help_suffix = "");
Shared<std::string> device(const std::string& help_suffix = "");
Shared<std::string> precision(const std::string& help_suffix = "");
Shared<std::string> gpu_layout(const std::string& help_suffix = "");
Shared<bool> explain_plan(const std::string& help_suffix = "");

}  // namespace mpicnn::cli::common
