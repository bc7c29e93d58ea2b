// MPI tests of dist::Messenger: ordered delivery between two ranks, an error reaching every
// rank, finish() ending cleanly with large (rendezvous) messages nobody read, and messengers
// in a row keeping their messages apart.
#include <chrono>
#include <string>
#include <thread>

#include "dist/messenger.h"
#include "testing.h"

using namespace mpicnn;

namespace {
dist::Comm& comm() {
  static dist::Comm c(nullptr, nullptr);  // adopts the MPI that mpi_main.cpp initialised
  return c;
}
}  // namespace

TEST_CASE("dist messenger: messages from one sender arrive in order, finish counts them all") {
  const dist::Comm& c = comm();
  const int K = c.size(), r = c.rank();
  dist::Messenger m(c);
  // Every rank sends 50 numbered messages to the next; rank r reads them from rank r-1.
  for (int i = 0; i < 50; ++i) m.send((r + 1) % K, 7, dist::ByteWriter().put(int32_t(i)).put(std::string(i, 'x')).take());
  int expected = 0;
  bool ordered = true;
  while (expected < 50) {
    const dist::Message msg = m.wait();
    dist::ByteReader rd(msg.bytes);
    ordered = ordered && msg.source == (r + K - 1) % K && msg.tag == 7 && rd.get<int32_t>() == expected &&
              rd.get_string() == std::string(expected, 'x');
    ++expected;
  }
  // 4 MiB messages (above every eager limit) that the receiver never asks for: finish() must
  // still receive them, or this would hang (run_all.sh has a timeout).
  m.send((r + 1) % K, 8, std::vector<uint8_t>(4 << 20, uint8_t(r)));
  CHECK(m.finish().empty());
  CHECK(ordered);
}

TEST_CASE("dist messenger: an error sent by one rank reaches every other rank") {
  const dist::Comm& c = comm();
  const int K = c.size(), r = c.rank();
  dist::Messenger m(c);
  std::string seen;
  if (r == K - 1) {
    m.send_error("rank " + std::to_string(r) + ": broken image");
  } else {
    try {
      for (;;) m.wait();
    } catch (const dist::RemoteError& e) {
      seen = e.message();
    }
  }
  const std::string remote = m.finish();
  if (r == K - 1) {
    CHECK(remote.empty());
  } else {
    CHECK(seen == "rank " + std::to_string(K - 1) + ": broken image");
    CHECK(remote == seen);
  }
}

TEST_CASE("dist messenger: back-to-back messengers never take each other's messages") {
  // A rank that leaves finish() first starts the next Messenger and sends at once; a rank
  // still inside its previous finish() must not receive (and discard) that message. Each
  // Messenger has its own communicator, so round i only ever sees round i's message.
  const dist::Comm& c = comm();
  const int K = c.size(), r = c.rank();
  int wrong = 0;
  for (int round = 0; round < 100; ++round) {
    dist::Messenger m(c);
    m.send((r + 1) % K, round % 1000, std::vector<uint8_t>(size_t(1 + round % 7), uint8_t(round)));
    const dist::Message got = m.wait();
    wrong += got.tag != round % 1000 || got.source != (r + K - 1) % K ||
             got.bytes != std::vector<uint8_t>(size_t(1 + round % 7), uint8_t(round));
    // One rank joins finish() late, so the others wait in it while it leaves first.
    if (r == round % K) std::this_thread::sleep_for(std::chrono::microseconds(500));
    CHECK(m.finish().empty());
  }
  CHECK(wrong == 0);
}
