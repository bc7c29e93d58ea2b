// The structural half of the PyTorch parity test: the engine's own layers, models and
// optimizers compiled with real = double (namespace mpicnn_f64: see core/real.h and the
// Makefile's F64 build) against PyTorch float64, from the same weights, input and targets. In
// double, rounding (1e-16) cannot flip a ReLU or max-pool decision or cancel a BatchNorm
// gradient into noise, so every logit, loss, gradient, final parameter, buffer and update must
// agree to ~1e-9: any difference in an operation, a gradient formula or an optimizer step
// (a factor of 1.001 in one gradient, a missing term) shows as an error of its own size, many
// orders above the tolerance. tests/test_model_parity.cpp calls check_f64 for every case.
#include <cmath>

#include "parity_run.h"

#undef CHECK
#undef FAIL
#include <doctest/doctest.h>

static_assert(sizeof(mpicnn_f64::real) == 8, "tests/f64 must be built with MPICNN_F64=1");

namespace parity {

namespace {

using namespace mpicnn_f64;

// Measured over every case under the five GEMM settings of tests/README.md: the largest error
// of a compared tensor is 9e-12 (a running mean of resnet50 after 3 steps) and of an update
// 3.5e-11 (resnet50), and below 1e-14 in models without BatchNorm; these leave two orders of
// margin and are still six below the smallest planted bug (a gradient scaled by 1.001).
constexpr double kTol = 1e-9;        // logits, losses, gradients, final values
constexpr double kUpdateTol = 1e-8;  // final - initial, relative to the exact update

void expect(const Case& c, const std::string& what, double err, double tol) {
  log_error("float64", c.tag, what, err, tol);
  CHECK_MESSAGE(err <= tol, "float64 engine, case ", c.tag, ": ", what, ": relative error ",
                err, " > ", tol);
}

}  // namespace

void check_f64(const Case& c, const std::string& dir) {
  parity_run::CaseRun run(c, dir);
  const SafetensorsReader& ref = run.ref;
  const std::vector<StateEntry>& entries = run.model->params().entries();
  for (int step = 0; step < kSteps; ++step) {
    const Tensor& logits = run.forward_backward();
    const std::string loss_key = "loss." + std::to_string(step);
    const double want = ref.read_f64(loss_key)[0];
    expect(c, loss_key, std::fabs(run.total_loss() - want) / std::fabs(want), kTol);
    if (step == 0) {
      expect(c, "logits", rel_err(logits.data(), run.view("logits")), kTol);
      // Floor: 1e-3 of the whole gradient's norm (conv biases before BatchNorm have an exact
      // gradient of 0; rounding leaves ~1e-17, whose relative error means nothing).
      const double floor = 1e-3 * run.reference_norm("grad.");
      for (const StateEntry& e : entries)
        if (e.kind == StateKind::Param)
          expect(c, "grad." + e.name, rel_err(e.grad->data(), run.view("grad." + e.name), floor),
                 kTol);
    }
    run.opt->step();
  }
  // Floor of the update check: 1e-3 of the norm of the whole update.
  double total = 0;
  for (const StateEntry& e : entries)
    if (e.kind == StateKind::Param) {
      const auto want = parity::diff_view(run.view("final." + e.name), run.initial(e),
                                          size_t(e.shape.numel()));
      for (size_t i = 0; i < want.size(); ++i) total += want[i] * want[i];
    }
  for (const StateEntry& e : entries) {
    const std::string key = "final." + e.name;
    if (e.kind == StateKind::BufferI64) {
      CHECK_MESSAGE(*e.i64 == ref.read_i64_scalar(key), "float64 engine, case ", c.tag, ": ", key);
      continue;
    }
    const parity::F64View want = run.view(key);
    expect(c, key, rel_err(e.value->data(), want), kTol);
    if (e.kind != StateKind::Param) continue;
    // The update alone: a wrong optimizer term is a small part of a final weight (lr 1e-4),
    // but all of the update.
    expect(c, "update." + e.name,
           rel_err(run.update(e), parity::diff_view(want, run.initial(e), want.size()),
                   1e-3 * std::sqrt(total)),
           kUpdateTol);
  }
}

}  // namespace parity
