// LR schedules on their own: per-step warmup, decay at epoch boundaries, constant, the linear
// scaling rule, and a clear error for every malformed spec or argument. Parity with torch's
// lr_scheduler is in test_optim.cpp, which shares one PyTorch run with the optimizers.
#include <string>
#include <utility>

#include "optim/schedule.h"
#include "testing.h"

using namespace mpicnn;
using mpicnn::testing::expect_error;

TEST_CASE("lr schedules: per-step warmup, constant, scaling rule") {
  const LrSchedule s = parse_lr_schedule("warmup:3:0.1+cosine:0.01", 0.5, 20);
  CHECK(s.warmup_epochs() == 3);
  CHECK(s.lr(0, 0, 7) == doctest::Approx(0.05).epsilon(1e-15));
  double prev = 0;
  for (int64_t e = 0; e < 3; ++e)
    for (int64_t k = 0; k < 7; ++k) {
      CHECK(s.lr(e, k, 7) > prev);  // rises every step, not once per epoch
      CHECK(s.lr(e, k, 7) < 0.5);
      prev = s.lr(e, k, 7);
    }
  CHECK(s.lr(3, 0, 7) == 0.5);  // warmup ends at the base lr, where cosine starts
  prev = 0.5;
  for (int64_t e = 3; e < 20; ++e)
    for (int64_t k = 0; k < 7; ++k) {
      CHECK(s.lr(e, k, 7) <= prev);
      prev = s.lr(e, k, 7);
    }
  CHECK(s.lr_at(20) == doctest::Approx(0.01).epsilon(1e-12));  // ends at eta_min

  const LrSchedule st = parse_lr_schedule("step:2:0.1", 1.0, 10);
  CHECK(st.lr(1, 6, 7) == 1.0);  // step schedules decay at epoch boundaries only
  CHECK(st.lr(2, 0, 7) == doctest::Approx(0.1).epsilon(1e-15));

  const LrSchedule c = parse_lr_schedule("constant", 0.3, 5);
  const LrSchedule cw = parse_lr_schedule("warmup:2:0.5+constant", 0.3, 5);
  for (int64_t e = 0; e < 5; ++e) {
    CHECK(c.lr(e, 3, 4) == 0.3);
    CHECK(cw.lr(e, 0, 4) == (e == 0 ? 0.15 : e == 1 ? doctest::Approx(0.225) : doctest::Approx(0.3)));
  }
  CHECK(!parse_lr_schedule("multistep:30,60,80:0.1", 0.1, 90).describe().empty());

  CHECK(scale_lr(0.1, 512) == doctest::Approx(0.2).epsilon(1e-15));
  CHECK(scale_lr(0.1, 64, 32) == doctest::Approx(0.2).epsilon(1e-15));
  expect_error([] { scale_lr(0.1, 0); }, "batch sizes 0");
}

TEST_CASE("lr schedule: poly decays per step to its end lr, then stays there (MLPerf's LARS schedule)") {
  // torch's PolynomialLR agrees per epoch (tests/test_optim.cpp, end lr 0); here the end lr,
  // the per-step values and the flat end, against the closed form.
  const LrSchedule s = parse_lr_schedule("warmup:2+poly:2:0.0001", 4.0, 12);
  CHECK(s.kind() == LrSchedule::Kind::Poly);
  for (const double t : {0.0, 0.25, 3.5, 7.0, 9.75}) {
    const double want = 0.0001 + (4.0 - 0.0001) * std::pow(1 - t / 10, 2);
    CHECK(s.lr_at(2 + t) == doctest::Approx(want).epsilon(1e-14));
  }
  CHECK(s.lr_at(12) == doctest::Approx(0.0001).epsilon(1e-14));
  CHECK(s.lr_at(15) == doctest::Approx(0.0001).epsilon(1e-14));  // past T_max: flat
  CHECK(s.lr(5, 3, 4) == s.lr_at(5.75));
  CHECK(s.describe() == "poly(lr=4, T_max=10, power=2, end_lr=0.0001) after 2 warmup epochs from 0.1x");
}

TEST_CASE("lr schedule specs and arguments: clear errors") {
  const std::pair<const char*, const char*> bad[] = {
      {"", "unknown schedule ''"},
      {"linear", "unknown schedule 'linear'"},
      {"step", "expected step:STEP_SIZE:GAMMA"},
      {"step:30", "expected step:STEP_SIZE:GAMMA"},
      {"step:30:0.1:2", "expected step:STEP_SIZE:GAMMA"},
      {"step:x:0.1", "step size 'x' is not an integer"},
      {"step:2.5:0.1", "step size '2.5' is not an integer"},
      {"step:0:0.1", "step size 0 must be >= 1"},
      {"step:30:-0.1", "gamma -0.1 must be finite and > 0"},
      {"step:30:nan", "gamma nan must be"},
      {"multistep::0.1", "milestone '' is not an integer"},
      {"multistep:30,,60:0.1", "milestone '' is not an integer"},
      {"multistep:60,30:0.1", "milestones must be increasing"},
      {"multistep:0,30:0.1", "milestones must be increasing epochs >= 1"},
      {"cosine:abc", "eta_min 'abc' is not a number"},
      {"cosine:-1", "eta_min -1 must be"},
      {"cosine:0:1", "expected cosine or cosine:ETA_MIN"},
      {"constant:1", "expected 'constant' with no arguments"},
      {"warmup:5", "warmup needs a schedule after it"},
      {"warmup:0+cosine", "warmup epochs must be >= 1"},
      {"warmup:5:0+cosine", "start factor must be in (0, 1]"},
      {"warmup:5:1.5+step:30:0.1", "start factor must be in (0, 1]"},
      {"warmup+cosine", "expected warmup:EPOCHS"},
      {"step:30:0.1+cosine", "before '+' expected warmup"},
      {"warmup:2+warmup:2+cosine", "at most one '+'"},
      {"warmup:10+cosine", "cosine needs epochs after the 10 warmup epochs"},
      {"poly:x", "power 'x' is not a number"},
      {"poly:0", "power 0 must be > 0"},
      {"poly:2:-1", "end lr -1 must be finite and >= 0"},
      {"poly:2:0:1", "expected poly, poly:POWER or poly:POWER:END_LR"},
      {"warmup:10+poly", "poly needs epochs after the 10 warmup epochs"},
  };
  for (const auto& [spec, part] : bad) {
    CAPTURE(spec);
    expect_error([&] { parse_lr_schedule(spec, 0.1, 10); }, part);
    expect_error([&] { parse_lr_schedule(spec, 0.1, 10); }, "learning-rate schedule '" + std::string(spec) + "'");
  }
  expect_error([] { parse_lr_schedule("cosine", 0.1, 0); }, "0 total epochs");
  expect_error([] { parse_lr_schedule("cosine", -0.1, 10); }, "learning rate -0.1");
  const LrSchedule s = LrSchedule::cosine(0.1, 10);
  expect_error([&] { s.lr(0, 0, 0); }, "0 steps per epoch");
  expect_error([&] { s.lr(0, 5, 5); }, "step 5 is outside an epoch of 5 steps");
  expect_error([&] { s.lr(0, -1, 5); }, "step -1 is outside");
  expect_error([&] { s.lr(-1, 0, 5); }, "epoch -1 is negative");
  expect_error([] { LrSchedule::cosine(0.1, 0); }, "T_max 0 must be > 0");
  expect_error([&] { s.with_warmup(2, 0); }, "start factor 0 must be in (0, 1]");
}
