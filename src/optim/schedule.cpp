// Learning-rate schedules: closed forms, warmup composition, spec parsing.
#include "optim/schedule.h"

#include <charconv>
#include <cmath>
#include <numbers>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "core/check.h"

namespace mpicnn {

static void check_base(double base_lr) {
  CHECK(std::isfinite(base_lr) && base_lr >= 0, "learning rate ", base_lr,
        " must be finite and >= 0");
}

static void check_gamma(double gamma) {
  CHECK(std::isfinite(gamma) && gamma > 0, "learning-rate decay factor gamma ", gamma,
        " must be finite and > 0");
}

LrSchedule LrSchedule::constant(double base_lr) {
  check_base(base_lr);
  LrSchedule s;
  s.base_lr_ = base_lr;
  return s;
}

LrSchedule LrSchedule::step(double base_lr, int64_t step_size, double gamma) {
  LrSchedule s = constant(base_lr);
  CHECK(step_size >= 1, "step schedule: step size ", step_size, " must be >= 1 epoch");
  check_gamma(gamma);
  s.kind_ = Kind::Step;
  s.step_size_ = step_size;
  s.gamma_ = gamma;
  return s;
}

LrSchedule LrSchedule::multistep(double base_lr, std::vector<int64_t> milestones, double gamma) {
  LrSchedule s = constant(base_lr);
  CHECK(!milestones.empty(), "multistep schedule needs at least one milestone");
  for (size_t i = 0; i < milestones.size(); ++i)
    CHECK(milestones[i] >= 1 && (i == 0 || milestones[i] > milestones[i - 1]),
          "multistep schedule: milestones must be increasing epochs >= 1 (milestone ", i + 1,
          " is ", milestones[i], ")");
  check_gamma(gamma);
  s.kind_ = Kind::MultiStep;
  s.milestones_ = std::move(milestones);
  s.gamma_ = gamma;
  return s;
}

LrSchedule LrSchedule::cosine(double base_lr, double t_max, double eta_min) {
  LrSchedule s = constant(base_lr);
  CHECK(std::isfinite(t_max) && t_max > 0, "cosine schedule: T_max ", t_max,
        " must be > 0 epochs");
  CHECK(std::isfinite(eta_min) && eta_min >= 0, "cosine schedule: eta_min ", eta_min,
        " must be finite and >= 0");
  s.kind_ = Kind::Cosine;
  s.t_max_ = t_max;
  s.eta_min_ = eta_min;
  return s;
}

LrSchedule LrSchedule::poly(double base_lr, double t_max, double power, double end_lr) {
  LrSchedule s = constant(base_lr);
  CHECK(std::isfinite(t_max) && t_max > 0, "poly schedule: T_max ", t_max, " must be > 0 epochs");
  CHECK(std::isfinite(power) && power > 0, "poly schedule: power ", power, " must be > 0");
  CHECK(std::isfinite(end_lr) && end_lr >= 0, "poly schedule: end lr ", end_lr,
        " must be finite and >= 0");
  s.kind_ = Kind::Poly;
  s.t_max_ = t_max;
  s.power_ = power;
  s.eta_min_ = end_lr;
  return s;
}

LrSchedule LrSchedule::with_warmup(int64_t epochs, double start_factor) const {
  CHECK(epochs >= 0, "warmup: ", epochs, " epochs must be >= 0");
  CHECK(start_factor > 0 && start_factor <= 1, "warmup: start factor ", start_factor,
        " must be in (0, 1]");
  LrSchedule s = *this;
  s.warmup_epochs_ = epochs;
  s.warmup_start_ = start_factor;
  return s;
}

double LrSchedule::lr(int64_t epoch, int64_t step, int64_t steps_per_epoch) const {
  CHECK(steps_per_epoch >= 1, "learning-rate schedule: ", steps_per_epoch,
        " steps per epoch (must be >= 1)");
  CHECK(epoch >= 0, "learning-rate schedule: epoch ", epoch, " is negative");
  CHECK(step >= 0 && step < steps_per_epoch, "learning-rate schedule: step ", step,
        " is outside an epoch of ", steps_per_epoch, " steps");
  // At step 0 this is exactly the integer epoch, so per-epoch values match torch's.
  return lr_at(double(epoch) + double(step) / double(steps_per_epoch));
}

double LrSchedule::lr_at(double t) const {
  CHECK(std::isfinite(t) && t >= 0, "learning-rate schedule: position ", t,
        " epochs must be >= 0");
  const double w = double(warmup_epochs_);
  if (t < w)  // LinearLR's closed form, evaluated at fractional epochs
    return base_lr_ * (warmup_start_ + (1.0 - warmup_start_) * t / w);
  return main_lr(t - w);
}

double LrSchedule::main_lr(double t) const {
  // Step and multistep look only at whole epochs, so they decay at epoch boundaries.
  const auto epoch = int64_t(std::floor(t));
  switch (kind_) {
    case Kind::Constant:
      return base_lr_;
    case Kind::Step:
      return base_lr_ * std::pow(gamma_, double(epoch / step_size_));
    case Kind::MultiStep: {
      int64_t passed = 0;
      for (int64_t m : milestones_) passed += m <= epoch;
      return base_lr_ * std::pow(gamma_, double(passed));
    }
    case Kind::Cosine:  // torch's operation order, so epoch values agree to the last bit or two
      return eta_min_ + (base_lr_ - eta_min_) * (1 + std::cos(std::numbers::pi * t / t_max_)) / 2;
    case Kind::Poly:  // torch's closed form with MLPerf's end lr; flat at the end after T_max
      return eta_min_ +
             (base_lr_ - eta_min_) * std::pow(1.0 - std::min(t, t_max_) / t_max_, power_);
  }
  FAIL("learning-rate schedule: unknown kind");
}

std::string LrSchedule::describe() const {
  std::ostringstream os;
  switch (kind_) {
    case Kind::Constant: os << "constant(lr=" << base_lr_ << ")"; break;
    case Kind::Step:
      os << "step(lr=" << base_lr_ << ", step_size=" << step_size_ << ", gamma=" << gamma_ << ")";
      break;
    case Kind::MultiStep:
      os << "multistep(lr=" << base_lr_ << ", milestones=";
      for (size_t i = 0; i < milestones_.size(); ++i) os << (i ? "," : "") << milestones_[i];
      os << ", gamma=" << gamma_ << ")";
      break;
    case Kind::Cosine:
      os << "cosine(lr=" << base_lr_ << ", T_max=" << t_max_ << ", eta_min=" << eta_min_ << ")";
      break;
    case Kind::Poly:
      os << "poly(lr=" << base_lr_ << ", T_max=" << t_max_ << ", power=" << power_
         << ", end_lr=" << eta_min_ << ")";
      break;
  }
  if (warmup_epochs_ > 0)
    os << " after " << warmup_epochs_ << " warmup epochs from " << warmup_start_ << "x";
  return os.str();
}

// ---- parsing ---------------------------------------------------------------------------

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t begin = 0;
  for (;;) {
    const size_t end = s.find(sep, begin);
    parts.push_back(s.substr(begin, end - begin));
    if (end == std::string::npos) return parts;
    begin = end + 1;
  }
}

// Whole-string numbers; `what` names the field in the error.
template <class T>
T number(const std::string& spec, const std::string& text, const char* what) {
  T v{};
  const char* end = text.data() + text.size();
  const auto r = std::from_chars(text.data(), end, v);
  CHECK(!text.empty() && r.ec == std::errc() && r.ptr == end, "learning-rate schedule '", spec,
        "': ", what, " '", text, "' is not ", std::is_integral_v<T> ? "an integer" : "a number");
  return v;
}

LrSchedule parse_main(const std::string& spec, const std::string& main, double base_lr,
                      double t_max) {
  const std::vector<std::string> f = split(main, ':');
  const auto want_fields = [&](size_t lo, size_t hi, const char* form) {
    CHECK(f.size() >= lo && f.size() <= hi, "learning-rate schedule '", spec, "': expected ",
          form);
  };
  if (f[0] == "constant") {
    want_fields(1, 1, "'constant' with no arguments");
    return LrSchedule::constant(base_lr);
  }
  if (f[0] == "step") {
    want_fields(3, 3, "step:STEP_SIZE:GAMMA, e.g. step:30:0.1");
    return LrSchedule::step(base_lr, number<int64_t>(spec, f[1], "step size"),
                            number<double>(spec, f[2], "gamma"));
  }
  if (f[0] == "multistep") {
    want_fields(3, 3, "multistep:M1,M2,...:GAMMA, e.g. multistep:30,60,80:0.1");
    std::vector<int64_t> milestones;
    for (const std::string& m : split(f[1], ',')) milestones.push_back(number<int64_t>(spec, m, "milestone"));
    return LrSchedule::multistep(base_lr, std::move(milestones),
                                 number<double>(spec, f[2], "gamma"));
  }
  if (f[0] == "cosine") {
    want_fields(1, 2, "cosine or cosine:ETA_MIN");
    return LrSchedule::cosine(base_lr, t_max, f.size() == 2 ? number<double>(spec, f[1], "eta_min") : 0.0);
  }
  if (f[0] == "poly") {
    want_fields(1, 3, "poly, poly:POWER or poly:POWER:END_LR");
    const double power = f.size() >= 2 ? number<double>(spec, f[1], "power") : 2.0;
    return LrSchedule::poly(base_lr, t_max, power,
                            f.size() == 3 ? number<double>(spec, f[2], "end lr") : 0.0);
  }
  FAIL("learning-rate schedule '", spec, "': unknown schedule '", f[0],
       "' (expected constant, step, multistep, cosine or poly)");
}

}  // namespace

LrSchedule parse_lr_schedule(const std::string& spec, double base_lr, int64_t total_epochs) {
  CHECK(total_epochs >= 1, "learning-rate schedule '", spec, "': ", total_epochs,
        " total epochs (must be >= 1)");
  const std::vector<std::string> parts = split(spec, '+');
  CHECK(parts.size() <= 2, "learning-rate schedule '", spec,
        "': at most one '+' (warmup:W+MAIN)");
  int64_t warmup = 0;
  double start = 0.1;
  if (parts.size() == 2) {
    const std::vector<std::string> w = split(parts[0], ':');
    CHECK(w[0] == "warmup" && (w.size() == 2 || w.size() == 3), "learning-rate schedule '", spec,
          "': before '+' expected warmup:EPOCHS or warmup:EPOCHS:START_FACTOR");
    warmup = number<int64_t>(spec, w[1], "warmup epochs");
    CHECK(warmup >= 1, "learning-rate schedule '", spec, "': warmup epochs must be >= 1");
    if (w.size() == 3) start = number<double>(spec, w[2], "warmup start factor");
    CHECK(start > 0 && start <= 1, "learning-rate schedule '", spec,
          "': warmup start factor must be in (0, 1]");
  }
  CHECK(split(parts.back(), ':')[0] != "warmup", "learning-rate schedule '", spec,
        "': warmup needs a schedule after it, e.g. ", parts.back(), "+cosine");
  const std::string& main = parts.back();
  const std::string main_kind = split(main, ':')[0];
  CHECK((main_kind != "cosine" && main_kind != "poly") || total_epochs > warmup,
        "learning-rate schedule '", spec, "': ", main_kind, " needs epochs after the ", warmup,
        " warmup epochs (", total_epochs, " in all)");
  try {
    return parse_main(spec, main, base_lr, double(total_epochs - warmup)).with_warmup(warmup, start);
  } catch (const Error& e) {
    // Errors from the factories name the field; add the spec the user typed.
    if (e.message().rfind("learning-rate schedule '", 0) == 0) throw;
    FAIL("learning-rate schedule '", spec, "': ", e.message());
  }
}

double scale_lr(double base_lr, int64_t global_batch, int64_t reference_batch) {
  CHECK(std::isfinite(base_lr) && base_lr >= 0, "learning rate ", base_lr,
        " must be finite and >= 0");
  CHECK(global_batch >= 1 && reference_batch >= 1, "linear lr scaling: batch sizes ",
        global_batch, " and ", reference_batch, " must be >= 1");
  return base_lr * double(global_batch) / double(reference_batch);
}

}  // namespace mpicnn
