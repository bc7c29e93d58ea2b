#include "recommend/xgb.h"

#include <xgboost/c_api.h>

#include <cmath>
#include <string>

#include "core/check.h"

namespace mpicnn::recommend::xgb {

namespace {

// XGBGetLastError's first line without its "[hh:mm:ss] source.h:81: " prefix: the message is
// followed by a multi-line stack trace that does not belong in a one-line error.
std::string last_error() {
  std::string e = XGBGetLastError();
  e = e.substr(0, e.find('\n'));
  if (!e.empty() && e[0] == '[') {
    const size_t close = e.find("] ");
    const size_t colon = close == std::string::npos ? close : e.find(": ", e.find(':', close + 2) + 1);
    if (colon != std::string::npos) e = e.substr(colon + 2);
  }
  return e;
}

// Every C API call returns 0 on success; the reason for anything else is in XGBGetLastError.
void check(int rc, const char* what) {
  if (rc != 0) FAIL("xgboost ", what, ": ", last_error());
}

}  // namespace

DMatrix::DMatrix(const std::vector<float>& values, size_t rows, size_t cols) : rows_(rows) {
  CHECK(values.size() == rows * cols, "xgboost DMatrix: ", values.size(), " values for ", rows, "x", cols);
  DMatrixHandle h = nullptr;
  check(XGDMatrixCreateFromMat(values.data(), bst_ulong(rows), bst_ulong(cols), NAN, &h), "DMatrix");
  h_ = h;
}

DMatrix::~DMatrix() {
  if (h_) XGDMatrixFree(h_);
}

void DMatrix::set_labels(const std::vector<float>& y) {
  CHECK(y.size() == rows_, "xgboost labels: ", y.size(), " for ", rows_, " rows");
  check(XGDMatrixSetFloatInfo(h_, "label", y.data(), bst_ulong(y.size())), "labels");
}

void DMatrix::set_base_margin(const std::vector<float>& m) {
  CHECK(m.size() == rows_, "xgboost base margin: ", m.size(), " for ", rows_, " rows");
  check(XGDMatrixSetFloatInfo(h_, "base_margin", m.data(), bst_ulong(m.size())), "base margin");
}

Booster::Booster() {
  BoosterHandle h = nullptr;
  check(XGBoosterCreate(nullptr, 0, &h), "create booster");
  h_ = h;
}

Booster::~Booster() {
  if (h_) XGBoosterFree(h_);
}

Booster Booster::train(const DMatrix& train, const std::vector<std::pair<std::string, std::string>>& params,
                       int rounds) {
  Booster b;
  XGBoosterFree(b.h_);
  b.h_ = nullptr;
  DMatrixHandle d = train.handle();
  BoosterHandle h = nullptr;
  check(XGBoosterCreate(&d, 1, &h), "create booster");
  b.h_ = h;
  for (const auto& [k, v] : params) check(XGBoosterSetParam(h, k.c_str(), v.c_str()), k.c_str());
  for (int i = 0; i < rounds; ++i) check(XGBoosterUpdateOneIter(h, i, d), "training round");
  return b;
}

std::vector<float> Booster::predict(const DMatrix& m) const {
  bst_ulong n = 0;
  const float* out = nullptr;
  check(XGBoosterPredict(h_, m.handle(), 0, 0, 0, &n, &out), "predict");
  CHECK(n == m.rows(), "xgboost predict: ", n, " predictions for ", m.rows(), " rows");
  return std::vector<float>(out, out + n);
}

std::string Booster::save_json() const {
  bst_ulong n = 0;
  const char* buf = nullptr;
  check(XGBoosterSaveModelToBuffer(h_, R"({"format":"json"})", &n, &buf), "save model");
  return std::string(buf, n);
}

void Booster::load_json(const std::string& text) {
  check(XGBoosterLoadModelFromBuffer(h_, text.data(), bst_ulong(text.size())), "load model");
}

void Booster::set_param(const std::string& name, const std::string& value) {
  check(XGBoosterSetParam(h_, name.c_str(), value.c_str()), name.c_str());
}

}  // namespace mpicnn::recommend::xgb
