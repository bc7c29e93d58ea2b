// A thin RAII layer over XGBoost's C API (Debian libxgboost-dev): a dense DMatrix with labels
// and base margins, and a Booster that trains, predicts, and round-trips through XGBoost's
// own JSON model format. Every C call is checked; a failure is an mpicnn::Error carrying
// XGBGetLastError()'s text.
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace mpicnn::recommend::xgb {

// Rows of `cols` features, row-major; NaN marks a missing value.
class DMatrix {
 public:
  DMatrix(const std::vector<float>& values, size_t rows, size_t cols);
  ~DMatrix();
  DMatrix(const DMatrix&) = delete;
  DMatrix& operator=(const DMatrix&) = delete;

  void set_labels(const std::vector<float>& y);
  // Each row's starting prediction (in the objective's margin space) that the trees add to:
  // how the recommender boosts from its scaling baseline.
  void set_base_margin(const std::vector<float>& m);
  void* handle() const { return h_; }
  size_t rows() const { return rows_; }

 private:
  void* h_ = nullptr;
  size_t rows_ = 0;
};

class Booster {
 public:
  Booster();  // an empty booster (load() fills it)
  ~Booster();
  Booster(Booster&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  Booster& operator=(Booster&& o) noexcept {
    std::swap(h_, o.h_);
    return *this;
  }
  Booster(const Booster&) = delete;
  Booster& operator=(const Booster&) = delete;

  // Trains `rounds` boosting rounds on `train` with XGBoost parameters (name, value).
  static Booster train(const DMatrix& train, const std::vector<std::pair<std::string, std::string>>& params,
                       int rounds);
  // Predictions (transformed by the objective, base margins included) for every row.
  std::vector<float> predict(const DMatrix& m) const;
  // XGBoost's JSON model text, and back.
  std::string save_json() const;
  void load_json(const std::string& text);
  void set_param(const std::string& name, const std::string& value);

 private:
  void* h_ = nullptr;
};

}  // namespace mpicnn::recommend::xgb
