// Tests of the shared option machinery (src/core/cli.*) on a small made-up program: tokenising
// (-xy multi-letter short names, "--name=", no prefix guessing, stray words), the converters'
// one-line errors, number formatting that reads back, the help layout, and table rows (binding,
// value text, refusal by task and value). The apps' own tables
// are tested in test_train_options.cpp and test_eval_options.cpp.
#include <string>
#include <vector>

#include "core/check.h"
#include "core/cli.h"
#include "testing.h"

namespace cli = mpicnn::cli;
using mpicnn::testing::expect_error;

namespace {

const cli::Program& demo() {
  static const cli::Program p{"./demo",
                              {{"count", "n", "N", cli::Kind::Value, "how many"},
                               {"learning-rate", "lr", "LR", cli::Kind::Value, "step size"},
                               {"verbose", "", "[=BOOL]", cli::Kind::Switch,
                                "say more; this help text is long enough to be wrapped onto a "
                                "second line by the formatter at one hundred columns"},
                               {"help", "h", "", cli::Kind::Help, "print this help and exit"}},
                              "inputs are -n N"};
  return p;
}

std::string get(const std::vector<std::string>& args, const std::string& key) {
  const auto vm = cli::parse_command_line(demo(), args);
  return vm.count(key) ? vm[key].as<std::string>() : "<none>";
}

}  // namespace

TEST_CASE("cli: tokenising, multi-letter short names, empty values, stray words") {
  CHECK(get({"-n", "3"}, "count") == "3");
  CHECK(get({"--count=4"}, "count") == "4");
  CHECK(get({"--count="}, "count") == "");
  CHECK(get({"-lr", "0.1"}, "learning-rate") == "0.1");
  CHECK(get({"-lr=0.2"}, "learning-rate") == "0.2");
  CHECK(get({"--verbose"}, "verbose") == "true");
  CHECK(get({"--verbose=off"}, "verbose") == "off");
  CHECK(cli::parse_command_line(demo(), {"-h"}).count("help") == 1);

  expect_error([] { get({"--cou", "3"}, "count"); },
               "unknown option '--cou' (./demo --help lists the options)");
  expect_error([] { get({"-lr0.1"}, "count"); },
               "unknown option '-lr0.1' (-lr/--learning-rate takes its value as -lr LR, -lr=LR "
               "or --learning-rate LR)");
  expect_error([] { get({"x"}, "count"); },
               "unexpected argument 'x': ./demo takes only options (inputs are -n N; a switch's "
               "value goes after '=', as in --verbose=false)");
  expect_error([] { get({"x", "y"}, "count"); }, "unexpected arguments 'x', 'y'");
  expect_error([] { get({"--count"}, "count"); }, "./demo --help lists the options");
}

TEST_CASE("cli: converters name the flag and what is accepted") {
  const cli::Given n{"12", "-n/--count"};
  CHECK(cli::to_int(n, 1) == 12);
  expect_error([&] { cli::to_int(n, 1, 10); }, "-n/--count: '12' is not an integer from 1 to 10");
  expect_error([] { cli::to_int({"1.5", "--c"}, 0); }, "--c: '1.5' is not an integer >= 0");
  expect_error([] { cli::to_int({"", "--c"}, 0); }, "--c: '' is not an integer >= 0");
  expect_error([] { cli::to_int32({"5000000000", "--c"}, 0); }, "an integer from 0 to 2147483647");
  CHECK(cli::to_uint64({"18446744073709551615", "--seed"}) == 18446744073709551615ull);
  expect_error([] { cli::to_uint64({"-1", "--seed"}); }, "--seed: '-1' is not an integer");
  CHECK(cli::to_double({"2.5e-1", "--lr"}, [](double x) { return x > 0; }, "a number > 0") == 0.25);
  expect_error([] { cli::to_double({"inf", "--lr"}, [](double) { return true; }, "finite"); },
               "--lr: 'inf' is not finite");
  CHECK(cli::to_bool({"ON", "--v"}));
  CHECK_FALSE(cli::to_bool({"no", "--v"}));
  expect_error([] { cli::to_bool({"maybe", "--v"}); }, "--v: 'maybe' is not a switch value");
  CHECK(cli::to_choice({"b", "--k"}, {"a", "b", "c"}) == "b");
  expect_error([] { cli::to_choice({"d", "--k"}, {"a", "b", "c"}); },
               "--k: 'd' is not one of a, b or c");
  CHECK(cli::to_float_list({"", "--mean"}, false).empty());
  CHECK(cli::to_float_list({"0.5, 1,2", "--mean"}, false) == std::vector<float>{0.5f, 1, 2});
  expect_error([] { cli::to_float_list({"1,2", "--mean"}, false); }, "a list of 1 or 3 numbers");
  expect_error([] { cli::to_float_list({"1,0,2", "--std"}, true); }, "a list of numbers > 0");

  CHECK(cli::parse_float_list("0.485,0.456, 0.406", "--mean") ==
        std::vector<float>{0.485f, 0.456f, 0.406f});
  CHECK(cli::parse_float_list("2", "--std") == std::vector<float>{2.0f});
  for (const char* bad : {"", "0.5,,0.2", "abc", "1,2x", "0.1,nan"})
    expect_error([&] { cli::parse_float_list(bad, "--mean"); }, "--mean: '");
}

TEST_CASE("cli: formatting reads back, help layout") {
  for (double v : {0.1, 1e-4, 0.05, 123456.789, 1.0 / 3})
    CHECK(cli::to_double({cli::format_double(v), "x"}, [](double) { return true; }, "") == v);
  const std::vector<float> list{0.485f, 0.456f, 1.0f / 3};
  CHECK(cli::parse_float_list(cli::format_float_list(list), "x") == list);
  CHECK(cli::format_float_list({}) == "");

  const std::string help = cli::format_options(demo(), {{"count", "7"}, {"verbose", ""}});
  const std::string column(30, ' ');  // where every help text starts
  CHECK(help.find("  -n, --count N" + column.substr(15) + "how many [default 7]\n") != std::string::npos);
  CHECK(help.find("  -lr, --learning-rate LR" + column.substr(25) + "step size\n") != std::string::npos);
  CHECK(help.find("--verbose[=BOOL]") != std::string::npos);
  CHECK(help.find("[default") == help.rfind("[default"));  // an empty default is not shown
  CHECK(mpicnn::testing::longest_line(help) <= 100);
  CHECK(help.find("\n" + column + "line by the formatter") != std::string::npos);  // wrapped
}

namespace {

struct DemoOptions {
  int count = 1;
  double rate = 0.5;
  std::string device = "auto";
  std::vector<std::string> names;
  mpicnn::Task task = mpicnn::Task::Classify;
};

}  // namespace

TEST_CASE("cli: table rows bind a field, write it back and refuse by task and value") {
  using mpicnn::Task;
  using cli::Tasks;
  const cli::Flag<DemoOptions> count{{"count", "n", "N", cli::Kind::Value, "how many"},
                                     cli::bind_to(&DemoOptions::count, cli::int32_from(1)),
                                     Tasks::classify, {"3"}};
  // A converter may read the options parsed so far.
  const cli::Flag<DemoOptions> rate{
      {"rate", "", "R", cli::Kind::Value, "step size"},
      cli::bind_to(&DemoOptions::rate,
                   [](const cli::Given& g, const DemoOptions& o) {
                     return cli::to_double(g, [](double) { return true; }, "") * o.count;
                   }),
      Tasks::both, {"0.25"}};
  // A row shared by programs, bound to this one's field.
  cli::Shared<std::string> shared{{"device", "", "NAME", cli::Kind::Value, "where"}, {}};
  shared.convert = cli::choice({"auto", "cpu", "cuda"});
  const cli::Flag<DemoOptions> device{shared, &DemoOptions::device, Tasks::both, {"cpu"},
                                      {Task::Detection, {"cuda"}}};
  DemoOptions o;
  count.value.parse(o, {"4", "-n/--count"});
  rate.value.parse(o, {"0.25", "--rate"});
  CHECK(o.count == 4);
  CHECK(o.rate == 1.0);
  CHECK(count.value.text(o) == "4");
  CHECK(rate.value.text(o) == "1");
  CHECK_FALSE(count.value.same(o, DemoOptions{}));
  CHECK(device.value.same(o, DemoOptions{}));
  expect_error([&] { count.value.parse(o, {"0", "-n/--count"}); },
               "-n/--count: '0' is not an integer >= 1");
  CHECK(cli::option_defs(std::vector<cli::Flag<DemoOptions>>{count, device})[1].name ==
        std::string("device"));

  // A task that does not take a flag refuses every value but the default; one that takes it
  // refuses only the values its refusal lists.
  CHECK(cli::takes(Tasks::both, Task::Detection));
  CHECK_FALSE(cli::takes(Tasks::classify, Task::Detection));
  CHECK(count.refuses(o, Task::Detection));
  CHECK_FALSE(count.refuses(DemoOptions{}, Task::Detection));
  CHECK_FALSE(count.refuses(o, Task::Classify));
  DemoOptions gpu;
  device.value.parse(gpu, {"cuda", "--device"});
  CHECK(device.refuses(gpu, Task::Detection));
  CHECK_FALSE(device.refuses(gpu, Task::Classify));
  CHECK_FALSE(device.refuses(DemoOptions{}, Task::Detection));
  CHECK(device.sample(Task::Detection) == "cpu");

  // value_text: what the command line takes back.
  CHECK(cli::value_text(true) == "true");
  CHECK(cli::value_text(int64_t(-3)) == "-3");
  CHECK(cli::value_text(uint64_t(18446744073709551615ull)) == "18446744073709551615");
  CHECK(cli::value_text(0.1) == "0.1");
  CHECK(cli::value_text(std::vector<float>{0.5f, 0.25f}) == "0.5,0.25");
  CHECK(cli::value_text(std::vector<std::string>{"conv1", "bn1"}) == "conv1,bn1");
  CHECK(cli::value_text(Task::Detection) == "detection");
}
