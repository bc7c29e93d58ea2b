// safetensors: round trips of every dtype, interop
// with torch in both directions (tests/python/write_safetensors.py), every malformed-file
// case the reader must reject, and atomic writes.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <zlib.h>

#include "core/half.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "testing.h"

using namespace mpicnn;
namespace fs = std::filesystem;

using mpicnn::testing::TempDir;

namespace {

std::vector<uint8_t> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open ", path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void spit(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  REQUIRE(out.good());
}

std::vector<uint8_t> as_bytes(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  return {b, b + n};
}

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

// Same float32 bits, or both NaN (torch and we need not agree on a NaN's payload).
bool same_float(float a, float b) { return bits(a) == bits(b) || (std::isnan(a) && std::isnan(b)); }

// A file from a header text and a data buffer, the length prefix taken from the text
// unless given (to forge lengths).
std::vector<uint8_t> make_file(const std::string& header, size_t data_bytes = 0,
                               std::optional<uint64_t> length = std::nullopt) {
  const uint64_t n = length.value_or(header.size());
  std::vector<uint8_t> f(8 + header.size() + data_bytes);
  std::memcpy(f.data(), &n, 8);
  std::memcpy(f.data() + 8, header.data(), header.size());
  for (size_t i = 0; i < data_bytes; ++i) f[8 + header.size() + i] = uint8_t(i);
  return f;
}

// The reader must refuse these bytes with an mpicnn::Error naming the file and the problem.
void expect_rejected(const std::vector<uint8_t>& bytes, const std::string& needle) {
  try {
    SafetensorsReader::from_bytes(bytes, "bad.safetensors");
    FAIL_CHECK("accepted a malformed file; expected an error containing: ", needle);
  } catch (const mpicnn::Error& e) {
    const std::string& m = e.message();
    CHECK_MESSAGE(m.find(needle) != std::string::npos, "message '", m, "' lacks '", needle, "'");
    CHECK_MESSAGE(m.find("bad.safetensors") != std::string::npos, "message '", m,
                  "' does not name the file");
  }
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const mpicnn::Error& e) {
    return e.message();
  }
  return "(no error)";
}

bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

int run_python(const std::string& args) {
  const char* py = std::getenv("PYTHON");
  const std::string cmd = std::string("'") + (py && *py ? py : "/usr/bin/python3") + "' '" +
                          testing::source_dir() + "/tests/python/write_safetensors.py' " + args;
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

}  // namespace

TEST_CASE("safetensors round trip: every dtype, metadata, empty and scalar tensors") {
  TempDir dir;
  const std::vector<double> f64 = {1.5, -2.25, 1e-300, 3e38, -0.0, 7};
  const std::vector<float> f32 = {1.0f, -2.5f, 3.25f, 1e-8f};
  const std::vector<float> halves = {1.0f, -2.5f, 65504.0f, std::ldexp(1.0f, -24)};
  const std::vector<int64_t> i64 = {std::numeric_limits<int64_t>::min(), -1, 0, 1LL << 40};
  const std::vector<int32_t> i32 = {-7, 1 << 30};
  const std::vector<int16_t> i16 = {-32768, 32767, 5};
  const std::vector<int8_t> i8 = {-128, 127};
  const std::vector<uint64_t> u64 = {uint64_t(1) << 62};
  const std::vector<uint32_t> u32 = {4000000000u, 1};
  const std::vector<uint16_t> u16 = {65535};
  const std::vector<uint8_t> u8 = {0, 200, 255}, boolean = {1, 0, 1, 1};

  SafetensorsWriter w;
  w.add("f64", DType::F64, {2, 3}, as_bytes(f64.data(), 48));
  w.add_f32("f32", f32.data(), {2, 2});
  w.add_f32("f16", halves.data(), {4}, DType::F16);
  w.add_f32("bf16", f32.data(), {1, 4}, DType::BF16);
  w.add_f32("f32_as_f64", f32.data(), {4}, DType::F64);
  w.add_i64("i64", i64.data(), {2, 2});
  w.add("i32", DType::I32, {2}, as_bytes(i32.data(), 8));
  w.add("i16", DType::I16, {3}, as_bytes(i16.data(), 6));
  w.add("i8", DType::I8, {2}, as_bytes(i8.data(), 2));
  w.add("u64", DType::U64, {1}, as_bytes(u64.data(), 8));
  w.add("u32", DType::U32, {2}, as_bytes(u32.data(), 8));
  w.add("u16", DType::U16, {1, 1}, as_bytes(u16.data(), 2));
  w.add("u8", DType::U8, {3}, u8);
  w.add("bool", DType::BOOL, {2, 2}, boolean);
  w.add_f32("empty", nullptr, {0, 3});
  w.add_i64_scalar("bn.num_batches_tracked", 12345);
  w.add_f32("scalar", f32.data(), {});
  w.set_metadata("format", "pt");
  w.set_metadata("epoch", "3");
  const std::string path = dir / "all.safetensors";
  w.write(path);

  const std::vector<uint8_t> file = slurp(path);
  CHECK(file == w.to_bytes());
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  CHECK(n % 8 == 0);
  const std::string header(file.begin() + 8, file.begin() + 8 + long(n));
  CHECK(header.rfind("{\"__metadata__\":{", 0) == 0);
  const size_t close = header.find_last_of('}');
  CHECK(header.find_first_not_of(' ', close + 1) == std::string::npos);  // padding: spaces

  SafetensorsReader r(path);
  const std::vector<std::string> names = {"f64", "f32", "f16", "bf16", "f32_as_f64", "i64", "i32",
      "i16", "i8", "u64", "u32", "u16", "u8", "bool", "empty", "bn.num_batches_tracked", "scalar"};
  REQUIRE(r.tensors().size() == names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    CHECK(r.tensors()[i].name == names[i]);
    CHECK(r.tensors()[i].begin == (i ? r.tensors()[i - 1].end : 0));  // packed in order
  }
  CHECK(r.metadata() == std::map<std::string, std::string>{{"epoch", "3"}, {"format", "pt"}});
  CHECK(r.metadata("epoch") == "3");

  CHECK(r.info("f64").dtype == DType::F64);
  CHECK(r.info("f64").shape == Dims{2, 3});
  CHECK(r.info("bf16").dtype == DType::BF16);
  CHECK(r.info("empty").shape == Dims{0, 3});
  CHECK(r.info("empty").nbytes() == 0);
  CHECK(r.info("scalar").shape.empty());
  CHECK(r.bytes("i32").size() == 8);
  CHECK(std::memcmp(r.bytes("i16").data(), i16.data(), 6) == 0);
  CHECK(std::memcmp(r.bytes("u32").data(), u32.data(), 8) == 0);
  CHECK(std::vector<uint8_t>(r.bytes("bool").begin(), r.bytes("bool").end()) == boolean);

  const std::vector<float> f64_back = r.read_f32("f64");
  for (size_t i = 0; i < f64.size(); ++i) CHECK(bits(f64_back[i]) == bits(float(f64[i])));
  CHECK(r.read_f32("f32") == f32);
  CHECK(r.read_f32("f16") == halves);  // exactly representable in fp16
  CHECK(r.read_f32("f32_as_f64") == f32);
  const std::vector<float> bf = r.read_f32("bf16");
  for (size_t i = 0; i < f32.size(); ++i) CHECK(bits(bf[i]) == uint32_t(float_to_bf16(f32[i])) << 16);
  CHECK(r.read_f32("empty").empty());
  CHECK(r.read_f32("scalar") == std::vector<float>{1.0f});
  Tensor t = Tensor::empty({2, 2});
  r.read(t, "f32");
  CHECK(t[3] == f32[3]);

  CHECK(r.read_i64("i64") == i64);
  CHECK(r.read_i64("i32") == std::vector<int64_t>{-7, 1 << 30});
  CHECK(r.read_i64("i16") == std::vector<int64_t>{-32768, 32767, 5});
  CHECK(r.read_i64("i8") == std::vector<int64_t>{-128, 127});
  CHECK(r.read_i64("u64") == std::vector<int64_t>{int64_t(1) << 62});
  CHECK(r.read_i64("u32") == std::vector<int64_t>{4000000000LL, 1});
  CHECK(r.read_i64("u16") == std::vector<int64_t>{65535});
  CHECK(r.read_i64("u8") == std::vector<int64_t>{0, 200, 255});
  CHECK(r.read_i64_scalar("bn.num_batches_tracked") == 12345);

  // Typed-read misuse: one clear line naming the file and tensor.
  Tensor wrong = Tensor::empty({4});
  CHECK(has(error_of([&] { r.read(wrong, "f32"); }), "'f32' has shape [2, 2], expected [4]"));
  CHECK(has(error_of([&] { r.read_f32("i64"); }), "'i64' has dtype I64, expected a float dtype"));
  CHECK(has(error_of([&] { r.read_i64("f32"); }), "'f32' has dtype F32, expected an integer"));
  CHECK(has(error_of([&] { r.read_i64_scalar("i64"); }), "expected a scalar"));
  CHECK(has(error_of([&] { r.info("conv1.weight"); }), path + ": no tensor named 'conv1.weight'"));
  CHECK(has(error_of([&] { r.metadata("step"); }), "no metadata entry 'step'"));
  CHECK(!r.contains("conv1.weight"));
  CHECK(r.contains("u8"));
}

TEST_CASE("safetensors interop with torch, both directions") {
  TempDir dir;
  REQUIRE_MESSAGE(run_python("'" + dir.path.string() + "'") == 0,
                  "tests/python/write_safetensors.py failed (is PYTHON a python with torch?)");
  const nlohmann::json manifest = nlohmann::json::parse(slurp(dir / "manifest.json"));
  SafetensorsReader r(dir / "model.safetensors");

  // torch -> C++: names in header order, dtypes, shapes, bytes, and the conversions.
  const auto& entries = manifest["tensors"];
  REQUIRE(r.tensors().size() == entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& m = entries[i];
    const std::string name = m["name"];
    CAPTURE(name);
    const TensorInfo& t = r.tensors()[i];
    CHECK(t.name == name);
    CHECK(std::string(dtype_name(t.dtype)) == m["dtype"].get<std::string>());
    CHECK(t.shape == m["shape"].get<Dims>());
    const std::vector<uint8_t> raw = slurp(dir / m["raw"].get<std::string>());
    CHECK(std::vector<uint8_t>(r.bytes(name).begin(), r.bytes(name).end()) == raw);
    if (m.contains("f32")) {
      const std::vector<uint8_t> ref = slurp(dir / m["f32"].get<std::string>());
      const std::vector<float> got = r.read_f32(name);
      REQUIRE(ref.size() == got.size() * 4);
      int bad = 0;
      for (size_t k = 0; k < got.size(); ++k) {
        float want;
        std::memcpy(&want, ref.data() + 4 * k, 4);
        bad += !same_float(got[k], want);
      }
      CHECK_MESSAGE(bad == 0, bad, " values differ from torch's .float()");
    }
    if (m.contains("i64")) {
      const std::vector<uint8_t> ref = slurp(dir / m["i64"].get<std::string>());
      const std::vector<int64_t> got = r.read_i64(name);
      REQUIRE(ref.size() == got.size() * 8);
      CHECK(std::memcmp(ref.data(), got.data(), ref.size()) == 0);
    }
  }
  CHECK(r.info("1.num_batches_tracked").dtype == DType::I64);
  CHECK(r.info("1.num_batches_tracked").shape.empty());
  CHECK(r.metadata() == manifest["metadata"].get<std::map<std::string, std::string>>());

  // C++ -> torch: every tensor copied, plus each F32 tensor rounded to fp16 and bf16 by us.
  SafetensorsWriter w;
  for (const auto& [k, v] : r.metadata()) w.set_metadata(k, v);
  for (const TensorInfo& t : r.tensors()) w.add(t.name, t.dtype, t.shape, r.bytes(t.name));
  for (const TensorInfo& t : r.tensors()) {
    if (t.dtype != DType::F32) continue;
    const std::vector<float> v = r.read_f32(t.name);
    w.add_f32(t.name + ":f16", v.data(), t.shape, DType::F16);
    w.add_f32(t.name + ":bf16", v.data(), t.shape, DType::BF16);
  }
  const std::string ours = dir / "from_cpp.safetensors";
  w.write(ours);
  CHECK_MESSAGE(run_python("--check '" + ours + "' '" + dir.path.string() + "'") == 0,
                "torch disagrees with the C++ writer (see the lines above)");

  // The check is not vacuous: one flipped bit in a converted tensor makes it fail.
  std::vector<uint8_t> bytes = w.to_bytes();
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  bytes[8 + header_len + size_t(SafetensorsReader(ours).info("0.weight:f16").begin)] ^= 1;
  const std::string tampered = dir / "tampered.safetensors";
  spit(tampered, bytes);
  CHECK(run_python("--check '" + tampered + "' '" + dir.path.string() + "' 2>/dev/null") == 1);
}

TEST_CASE("safetensors reader rejects malformed files with one clear error") {
  // Entry JSON for a tensor; shape and offsets as raw JSON so tests can break them.
  auto entry = [](const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return "{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
  };
  const std::string a4 = "\"a\":" + entry("F32", "[1]", "[0,4]");

  SUBCASE("length prefix") {
    expect_rejected({}, "too short");
    expect_rejected({1, 0, 0, 0, 0, 0, 0}, "too short");
    expect_rejected(make_file("{}", 0, 100000001), "exceeds the limit of 100000000");
    expect_rejected(make_file("{}", 0, ~uint64_t(0)), "exceeds the limit");
    expect_rejected(make_file("{}", 4, 50), "runs past the end of the file");
  }
  SUBCASE("header text") {
    expect_rejected(make_file("{\"a\xff\":1}"), "not valid UTF-8");
    expect_rejected(make_file("{\"\xc0\xaf\":1}"), "not valid UTF-8");      // overlong '/'
    expect_rejected(make_file("{\"\xed\xa0\x80\":1}"), "not valid UTF-8");  // surrogate
    expect_rejected(make_file(""), "not a JSON object");
    expect_rejected(make_file("  {}"), "not a JSON object");
    expect_rejected(make_file("[1,2]"), "not a JSON object");
    expect_rejected(make_file("{\"a\":"), "not valid JSON");
    expect_rejected(make_file("{} x"), "not valid JSON");
    expect_rejected(make_file(std::string("{\"a\"\0:1}", 8)), "not valid JSON");
    expect_rejected(make_file(std::string("{}\0 ", 4)), "NUL byte at byte 2");  // as padding
    // Hostile nesting is refused while parsing (no deep recursion, no huge DOM).
    const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
    expect_rejected(make_file("{\"a\":" + deep + "}"), "nested more than 8 levels");
    std::string objects;
    for (int i = 0; i < 100000; ++i) objects += "{\"k\":";
    expect_rejected(make_file(objects + "1" + std::string(100000, '}')), "nested more than 8 levels");
    expect_rejected(make_file("{\"a\":" + entry("F32", "[[1]]", "[0,4]") + "}", 4),
                    "non-negative integers, found a list");
  }
  SUBCASE("duplicate keys") {
    expect_rejected(make_file("{" + a4 + "," + a4 + "}", 4), "duplicate tensor name 'a'");
    expect_rejected(make_file("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],"
                              "\"data_offsets\":[0,4]}}", 4),
                    "duplicate key 'dtype' in entry 'a'");
    expect_rejected(make_file("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}"),
                    "duplicate key 'k' in entry '__metadata__'");
    expect_rejected(make_file("{\"__metadata__\":{},\"__metadata__\":{}}"),
                    "duplicate \"__metadata__\"");
  }
  SUBCASE("entry fields") {
    expect_rejected(make_file("{\"a\":[1]}"), "tensor 'a': entry must be an object");
    expect_rejected(make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4),
                    "tensor 'a': missing \"data_offsets\"");
    expect_rejected(make_file("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4), "missing \"dtype\"");
    expect_rejected(make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],"
                              "\"stride\":[1]}}", 4),
                    "tensor 'a': unknown key 'stride'");
    expect_rejected(make_file("{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
                    "dtype must be a string");
    expect_rejected(make_file("{\"a\":" + entry("F8", "[1]", "[0,1]") + "}", 1), "unknown dtype 'F8'");
    expect_rejected(make_file("{\"a\":" + entry("f32", "[1]", "[0,4]") + "}", 4), "unknown dtype 'f32'");
  }
  SUBCASE("shape") {
    const std::string need = "shape must be a list of non-negative integers";
    expect_rejected(make_file("{\"a\":" + entry("F32", "[-1]", "[0,4]") + "}", 4), need);
    expect_rejected(make_file("{\"a\":" + entry("F32", "[1.0]", "[0,4]") + "}", 4), need);
    expect_rejected(make_file("{\"a\":" + entry("F32", "[\"1\"]", "[0,4]") + "}", 4), need);
    expect_rejected(make_file("{\"a\":" + entry("F32", "4", "[0,4]") + "}", 4), need);
    expect_rejected(make_file("{\"a\":" + entry("F32", "[18446744073709551615]", "[0,4]") + "}", 4), need);
    expect_rejected(make_file("{\"a\":" + entry("F32", "[4294967296,4294967296]", "[0,4]") + "}", 4),
                    "has too many elements");
    expect_rejected(make_file("{\"a\":" + entry("F64", "[2305843009213693952]", "[0,4]") + "}", 4),
                    "has too many elements");  // numel fits, bytes do not
  }
  SUBCASE("data_offsets") {
    const std::string need = "data_offsets must be two non-negative integers";
    for (const char* bad : {"[0]", "[0,4,8]", "[-1,3]", "[0.0,4]", "\"0,4\"", "[0,null]"})
      expect_rejected(make_file("{\"a\":" + entry("F32", "[1]", bad) + "}", 4), need);
    expect_rejected(make_file("{\"a\":" + entry("F32", "[1]", "[4,0]") + "}", 4), "begin > end");
    expect_rejected(make_file("{\"a\":" + entry("F32", "[2]", "[0,4]") + "}", 4),
                    "span 4 bytes, but dtype F32 and shape [2] need 8");
    expect_rejected(make_file("{\"a\":" + entry("F32", "[2]", "[0,8]") + "}", 4),
                    "run past the end of the file");
  }
  SUBCASE("layout of the data buffer") {
    const std::string b = "\"b\":" + entry("F32", "[2]", "[4,12]");
    expect_rejected(make_file("{\"a\":" + entry("F32", "[2]", "[0,8]") + "," + b + "}", 12),
                    "tensor 'b' (bytes [4, 12)) overlaps tensor 'a'");
    expect_rejected(make_file("{" + a4 + ",\"b\":" + entry("F32", "[1]", "[8,12]") + "}", 12),
                    "hole in the data buffer: bytes [4, 8) before tensor 'b'");
    expect_rejected(make_file("{\"b\":" + entry("F32", "[1]", "[4,8]") + "}", 8), "hole");
    expect_rejected(make_file("{" + a4 + "}", 8), "4 trailing bytes after the last tensor");
    expect_rejected(make_file("{}", 1), "1 trailing bytes");
  }
  SUBCASE("__metadata__") {
    expect_rejected(make_file("{\"__metadata__\":\"pt\"}"), "__metadata__ must be an object");
    expect_rejected(make_file("{\"__metadata__\":{\"epoch\":3}}"),
                    "__metadata__ must map strings to strings, but 'epoch' is 3");
    expect_rejected(make_file("{\"__metadata__\":{\"x\":{}}}"), "'x' is an object");
  }
  SUBCASE("accepted edge cases") {
    // Header order need not be data order; empty tensors may sit anywhere; padding is spaces.
    const auto r = SafetensorsReader::from_bytes(
        make_file("{\"b\":" + entry("F32", "[1]", "[4,8]") + ",\"e\":" + entry("I64", "[0,5]", "[4,4]") +
                  "," + a4 + "}   ", 8), "ok.safetensors");
    REQUIRE(r.tensors().size() == 3);
    CHECK(r.tensors()[0].name == "b");
    CHECK(r.tensors()[2].name == "a");
    CHECK(r.read_i64("e").empty());
    CHECK(SafetensorsReader::from_bytes(make_file("{}"), "none").tensors().empty());
  }
  SUBCASE("values that cannot be converted") {
    const double big = 1e39;
    std::vector<uint8_t> f = make_file("{\"a\":" + entry("F64", "[1]", "[0,8]") + "}");
    f.insert(f.end(), reinterpret_cast<const uint8_t*>(&big), reinterpret_cast<const uint8_t*>(&big) + 8);
    const auto r = SafetensorsReader::from_bytes(f, "big.safetensors");
    CHECK(has(error_of([&] { r.read_f32("a"); }), "big.safetensors: tensor 'a' element 0"));
    const uint64_t huge = ~uint64_t(0);
    std::vector<uint8_t> g = make_file("{\"a\":" + entry("U64", "[1]", "[0,8]") + "}");
    g.insert(g.end(), reinterpret_cast<const uint8_t*>(&huge), reinterpret_cast<const uint8_t*>(&huge) + 8);
    CHECK(has(error_of([&] { SafetensorsReader::from_bytes(g, "u").read_i64("a"); }),
              "does not fit in int64"));
  }
}

// A small checksummed file: three tensors of three dtypes, data packed in this order.
std::vector<uint8_t> tiny_checksummed() {
  SafetensorsWriter w;
  const std::vector<float> v = {1, 2, 3, 4, 5, 6};
  w.add_f32("conv.weight", v.data(), {2, 3});
  w.add_f32("conv.bias", v.data(), {2}, DType::BF16);
  w.add_i64_scalar("bn.num_batches_tracked", 7);
  w.set_metadata("format", "pt");
  return w.to_bytes();
}

TEST_CASE("safetensors reader survives every truncation and many byte corruptions") {
  const std::vector<uint8_t> good = tiny_checksummed();
  int rejected = 0, accepted = 0;
  for (size_t len = 0; len < good.size(); ++len) {
    try {
      SafetensorsReader::from_bytes({good.begin(), good.begin() + long(len)}, "cut");
      ++accepted;
    } catch (const mpicnn::Error&) {
      ++rejected;
    }
  }
  CHECK(accepted == 0);  // any strict prefix leaves the buffer or the header incomplete
  // Any other exception type escaping (a JSON library error, std::out_of_range) fails here.
  uint64_t header_len = 0;
  std::memcpy(&header_len, good.data(), 8);
  for (size_t pos = 0; pos < 8 + header_len; ++pos) {
    for (uint8_t c : {uint8_t(0), uint8_t('"'), uint8_t('9'), uint8_t('}'), uint8_t(0xFF), uint8_t(',')}) {
      std::vector<uint8_t> bad = good;
      bad[pos] = c;
      try {
        (void)SafetensorsReader::from_bytes(bad, "mutant").tensors();
      } catch (const mpicnn::Error&) {
        ++rejected;
      }
    }
  }
  CHECK(rejected > 0);
}

namespace {


uint32_t zlib_crc(const std::vector<uint8_t>& b) {
  return uint32_t(::crc32(::crc32(0L, Z_NULL, 0), b.data(), uInt(b.size())));
}

}  // namespace

TEST_CASE("safetensors CRC-32s: written, hidden from metadata, zlib-compatible") {
  const std::vector<uint8_t> good = tiny_checksummed();
  const auto r = SafetensorsReader::from_bytes(good, "tiny.safetensors");
  CHECK(r.checksummed());
  CHECK(r.metadata() == std::map<std::string, std::string>{{"format", "pt"}});
  CHECK(r.digest().bytes == good.size());
  CHECK(r.digest().crc32 == zlib_crc(good));  // combined from the tensors' CRCs, no second pass
  // The stored value is zlib's (Python's zlib.crc32) over the tensor's bytes, in lowercase hex.
  uint64_t n = 0;
  std::memcpy(&n, good.data(), 8);
  const auto header = nlohmann::json::parse(good.begin() + 8, good.begin() + 8 + long(n));
  const auto bias = r.bytes("conv.bias");
  CHECK(header["__metadata__"]["crc32:conv.bias"] ==
        crc32_hex(uint32_t(::crc32(0, bias.data(), uInt(bias.size())))));
  CHECK(header["__metadata__"].contains("crc32-header"));

  TempDir dir;
  SafetensorsWriter w;
  w.add_i64_scalar("n", 1);
  const FileDigest d = w.write(dir / "n.safetensors");
  CHECK(d.bytes == slurp(dir / "n.safetensors").size());
  CHECK(d.crc32 == zlib_crc(slurp(dir / "n.safetensors")));
  CHECK(has(error_of([&] { w.set_metadata("crc32:n", "00000000"); }), "reserved for the CRC-32s"));
  CHECK(has(error_of([&] { w.set_metadata("crc32-header", "0"); }), "reserved"));

  // Another writer may re-save the file in another order (Python's safetensors sorts by dtype
  // and name): the CRCs stay valid, since they cover bytes per tensor and a sorted header.
  nlohmann::ordered_json h;
  h["__metadata__"] = header["__metadata__"];
  std::vector<uint8_t> data;
  for (const char* name : {"bn.num_batches_tracked", "conv.bias", "conv.weight"}) {
    const TensorInfo& t = r.info(name);
    const auto b = r.bytes(name);
    h[name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape},
               {"data_offsets", {data.size(), data.size() + b.size()}}};
    data.insert(data.end(), b.begin(), b.end());
  }
  std::vector<uint8_t> resaved = make_file(h.dump());
  resaved.insert(resaved.end(), data.begin(), data.end());
  const auto rr = SafetensorsReader::from_bytes(resaved, "resaved.safetensors");
  CHECK(rr.checksummed());
  CHECK(rr.read_f32("conv.weight") == r.read_f32("conv.weight"));
}

TEST_CASE("safetensors CRC-32s: files without them (torch, torchvision exports) still load") {
  const std::string e = "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}";
  for (const std::string& header : {"{\"a\":" + e + "}",
                                    "{\"__metadata__\":{\"format\":\"pt\"},\"a\":" + e + "}"}) {
    const std::vector<uint8_t> f = make_file(header, 4);
    const auto r = SafetensorsReader::from_bytes(f, "torch.safetensors");
    CHECK_FALSE(r.checksummed());
    CHECK(r.digest().crc32 == zlib_crc(f));
    CHECK(r.read_f32("a").size() == 1);
  }
}

TEST_CASE("safetensors CRC-32s: every flipped bit of a written file is refused naming the file") {
  const std::vector<uint8_t> good = tiny_checksummed();
  const auto ok = SafetensorsReader::from_bytes(good, "ok");
  const size_t data_start = good.size() - size_t(ok.tensors().back().end);
  int named_tensor = 0;
  for (size_t pos = 0; pos < good.size(); ++pos) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> bad = good;
      bad[pos] ^= uint8_t(1u << bit);
      CAPTURE(pos);
      CAPTURE(bit);
      const std::string msg = error_of([&] { SafetensorsReader::from_bytes(bad, "bad.safetensors"); });
      REQUIRE_MESSAGE(has(msg, "bad.safetensors: "), "flip accepted or unnamed: ", msg);
      named_tensor += has(msg, "tensor '");
      if (pos < data_start) continue;
      // A data byte: the message names the tensor that holds it and both CRC-32s.
      const int64_t at = int64_t(pos - data_start);
      for (const TensorInfo& t : ok.tensors())
        if (at >= t.begin && at < t.end)
          CHECK_MESSAGE(has(msg, "tensor '" + t.name + "' fails its CRC32 check (stored "), msg);
    }
  }
  CHECK(named_tensor > int(8 * (good.size() - data_start)));  // header flips name tensors too

  // Two header cases spelled out: a damaged CRC digit and a damaged tensor name.
  std::string text(good.begin(), good.end());
  std::string crc_digit = text;
  const size_t at = crc_digit.find("\"crc32:conv.bias\":\"") + 19;
  crc_digit[at] = crc_digit[at] == '0' ? '1' : '0';
  CHECK(has(error_of([&] {
              SafetensorsReader::from_bytes({crc_digit.begin(), crc_digit.end()}, "bad.safetensors");
            }),
            "bad.safetensors: tensor 'conv.bias' fails its CRC32 check"));
  std::string name = text;
  name[name.find("\"conv.weight\":{") + 1] = 'k';
  CHECK(has(error_of([&] { SafetensorsReader::from_bytes({name.begin(), name.end()}, "bad.safetensors"); }),
            "bad.safetensors: tensor 'konv.weight' has no CRC-32"));
  std::string meta = text;
  meta[meta.find("\"format\":\"pt\"") + 11] = 'q';  // a metadata value: only the header CRC sees it
  CHECK(has(error_of([&] { SafetensorsReader::from_bytes({meta.begin(), meta.end()}, "bad.safetensors"); }),
            "bad.safetensors: the header (tensor names, dtypes, shapes, metadata) fails its CRC32 check"));
}

TEST_CASE("safetensors CRC-32s: every truncation is refused naming the file and the cut tensor") {
  const std::vector<uint8_t> good = tiny_checksummed();
  const auto ok = SafetensorsReader::from_bytes(good, "ok");
  const size_t data_start = good.size() - size_t(ok.tensors().back().end);
  for (size_t len = 0; len < good.size(); ++len) {
    CAPTURE(len);
    const std::string msg = error_of(
        [&] { SafetensorsReader::from_bytes({good.begin(), good.begin() + long(len)}, "cut.safetensors"); });
    REQUIRE(has(msg, "cut.safetensors: "));
    if (len < 8) continue;  // no header length at all
    CHECK_MESSAGE(has(msg, "truncated"), msg);
    if (len < data_start) continue;
    // The first tensor (in data order) whose bytes are not all there.
    const int64_t have = int64_t(len - data_start);
    const TensorInfo* cut = nullptr;
    for (const TensorInfo& t : ok.tensors())
      if (!cut && t.end > have) cut = &t;
    REQUIRE(cut != nullptr);
    CHECK_MESSAGE(has(msg, "tensor '" + cut->name + "': data_offsets"), msg);
    CHECK_MESSAGE(has(msg, "run past the end of the file"), msg);
  }
}

TEST_CASE("safetensors writer validates its inputs") {
  SafetensorsWriter w;
  const std::vector<float> v = {1, 2, 3, 4};
  w.add_f32("x", v.data(), {4});
  CHECK(has(error_of([&] { w.add_f32("x", v.data(), {4}); }), "duplicate tensor name 'x'"));
  CHECK(has(error_of([&] { w.add("y", DType::F32, {2, 3}, std::vector<uint8_t>(20)); }),
            "tensor 'y': 20 bytes given, but dtype F32 and shape [2, 3] need 24"));
  CHECK(has(error_of([&] { w.add_f32("z", v.data(), {-1}); }), "negative extent"));
  CHECK(has(error_of([&] { w.add_f32("__metadata__", v.data(), {1}); }), "reserved"));
  CHECK(has(error_of([&] { w.add_f32("", v.data(), {1}); }), "empty tensor name"));
  CHECK(has(error_of([&] { w.add_f32("q", v.data(), {1}, DType::I32); }), "cannot store floats as I32"));
  CHECK(has(error_of([&] { w.add("big", DType::F32, {int64_t(1) << 62, 4}, {}); }), "too many elements"));
  CHECK(has(error_of([&] { w.set_metadata("k", "\xff"); }), "not valid UTF-8"));
  CHECK(w.size() == 1);  // nothing half-added by the failures
}

TEST_CASE("files that are not there, and targets that cannot be written") {
  TempDir dir;
  const std::string missing = dir / "nope.safetensors";
  CHECK(has(error_of([&] { SafetensorsReader r(missing); }),
            missing + ": cannot open: No such file or directory"));
  CHECK(has(error_of([&] { SafetensorsReader r(dir.path.string()); }), "not a regular file"));

  SafetensorsWriter w;
  w.add_i64_scalar("n", 1);
  const std::string no_dir = dir / "no/such/dir/w.safetensors";
  CHECK(has(error_of([&] { w.write(no_dir); }), "cannot write " + no_dir + ": No such file"));
  fs::create_directory(dir.path / "taken");
  const std::string is_dir = dir / "taken";
  CHECK(has(error_of([&] { w.write(is_dir); }), "cannot write " + is_dir));
  // The failed writes left no temporaries behind.
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 1);
}

TEST_CASE("atomic file: replaces whole, or leaves the old file untouched") {
  TempDir dir;
  const std::string path = dir / "ckpt.safetensors";
  write_file_atomic(path, std::vector<uint8_t>{1, 2, 3});
  CHECK(slurp(path) == std::vector<uint8_t>{1, 2, 3});
  {
    AtomicFile f(path);
    CHECK(fs::path(f.temp_path()).parent_path() == dir.path);  // same filesystem: rename works
    f.write(std::vector<uint8_t>{9, 9});
    CHECK(slurp(path) == std::vector<uint8_t>{1, 2, 3});  // nothing visible before commit
  }  // abandoned: the old file stays, the temporary goes
  CHECK(slurp(path) == std::vector<uint8_t>{1, 2, 3});
  {
    AtomicFile f(path);
    f.write(std::vector<uint8_t>{4, 5});
    f.write(std::vector<uint8_t>{6});
    f.commit();
    CHECK(has(error_of([&] { f.write(std::vector<uint8_t>{7}); }), "already committed"));
  }
  CHECK(slurp(path) == std::vector<uint8_t>{4, 5, 6});
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 1);
}
