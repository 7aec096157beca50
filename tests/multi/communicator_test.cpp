// The MPI communicator on two ranks: every collective's result, process groups, and a hung peer
// turned into an error that names it within the deadline.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "day0/dist/process_groups.h"
#include "world.h"

namespace day0::testing {
namespace {

TEST(MpiCommunicator, AllReduceSumsOverRanks) {
  D0_REQUIRE_TWO_RANKS();
  dist::Communicator& w = *test_world();
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(w.rank() + 1) * static_cast<float>(i);
  ASSERT_TRUE(w.all_reduce_sum(x).is_ok());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], 3.0f * static_cast<float>(i)) << i;
}

// The overlapped sum: started, compute in between, finished; another call in between is refused on
// this rank before it could be matched out of order, and the sum still completes.
TEST(MpiCommunicator, OverlappedAllReduceSumsAndRefusesCallsInBetween) {
  D0_REQUIRE_TWO_RANKS();
  dist::Communicator& w = *test_world();
  const dist::CommStats before = w.stats();
  std::vector<float> x(100000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(w.rank() + 1) * static_cast<float>(i % 977);
  ASSERT_TRUE(w.start_all_reduce_sum(x).is_ok());
  double busy = 0;  // independent compute while the sum travels
  for (int i = 0; i < 100000; ++i) busy += static_cast<double>(i) * 1e-9;
  std::vector<int32_t> one = {1}, two(2);
  const Status between = w.all_gather_of<int32_t>(one, two);
  EXPECT_EQ(between.code(), StatusCode::kInternal) << between.to_string();
  EXPECT_NE(between.message().find("still pending"), std::string::npos) << between.to_string();
  ASSERT_TRUE(w.finish_all_reduce().is_ok());
  EXPECT_GT(busy, 0);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], 3.0f * static_cast<float>(i % 977)) << i;
  EXPECT_EQ(w.stats().overlapped_calls, before.overlapped_calls + 1);
  EXPECT_EQ(w.stats().calls, before.calls + 1);
  EXPECT_GT(w.stats().overlapped_compute_seconds, before.overlapped_compute_seconds);
  EXPECT_TRUE(w.finish_all_reduce().is_ok());               // nothing pending: nothing to do
  ASSERT_TRUE(w.all_gather_of<int32_t>(one, two).is_ok());  // usable again
  // One process: the sum happens at the start.
  auto single = dist::make_single_process_communicator();
  std::vector<float> y = {1.5f, 2.5f};
  ASSERT_TRUE(single->start_all_reduce_sum(y).is_ok());
  ASSERT_TRUE(single->finish_all_reduce().is_ok());
  EXPECT_EQ(y, (std::vector<float>{1.5f, 2.5f}));
}

TEST(MpiCommunicator, AllGatherInRankOrder) {
  D0_REQUIRE_TWO_RANKS();
  dist::Communicator& w = *test_world();
  const std::vector<int32_t> mine = {10 * w.rank(), 10 * w.rank() + 1};
  std::vector<int32_t> all(4);
  ASSERT_TRUE(w.all_gather_of<int32_t>(mine, all).is_ok());
  EXPECT_EQ(all, (std::vector<int32_t>{0, 1, 10, 11}));
  std::vector<int32_t> short_buffer(3);
  EXPECT_EQ(w.all_gather_of<int32_t>(mine, short_buffer).code(), StatusCode::kInvalidArgument);
}

TEST(MpiCommunicator, AllToAllVMovesVariableSizes) {
  D0_REQUIRE_TWO_RANKS();
  dist::Communicator& w = *test_world();
  const int r = w.rank();
  // Rank r sends (p + 1) * (r + 1) bytes of value 16 r + p to peer p.
  std::vector<int64_t> send_counts(2), recv_counts(2);
  std::vector<std::byte> send;
  for (int p = 0; p < 2; ++p) {
    send_counts[static_cast<size_t>(p)] = (p + 1) * (r + 1);
    recv_counts[static_cast<size_t>(p)] = (r + 1) * (p + 1);
    send.insert(send.end(), static_cast<size_t>(send_counts[static_cast<size_t>(p)]),
                static_cast<std::byte>(16 * r + p));
  }
  std::vector<std::byte> recv(static_cast<size_t>(recv_counts[0] + recv_counts[1]));
  ASSERT_TRUE(w.all_to_all_v(send, send_counts, recv, recv_counts).is_ok());
  size_t at = 0;
  for (int p = 0; p < 2; ++p) {
    for (int64_t i = 0; i < recv_counts[static_cast<size_t>(p)]; ++i, ++at)
      ASSERT_EQ(recv[at], static_cast<std::byte>(16 * p + r)) << "from " << p;
  }
}

TEST(MpiCommunicator, SendAndReceiveBetweenPeers) {
  D0_REQUIRE_TWO_RANKS();
  dist::Communicator& w = *test_world();
  std::vector<float> data(64, static_cast<float>(w.rank()) + 0.5f), got(64);
  const int peer = 1 - w.rank();
  // Rank 0 sends first, rank 1 receives first: no deadlock even with synchronous sends.
  if (w.rank() == 0) {
    ASSERT_TRUE(w.send(std::as_bytes(std::span(data)), peer, 3).is_ok());
    ASSERT_TRUE(w.recv(std::as_writable_bytes(std::span(got)), peer, 3).is_ok());
  } else {
    ASSERT_TRUE(w.recv(std::as_writable_bytes(std::span(got)), peer, 3).is_ok());
    ASSERT_TRUE(w.send(std::as_bytes(std::span(data)), peer, 3).is_ok());
  }
  EXPECT_EQ(got[0], static_cast<float>(peer) + 0.5f);
  EXPECT_EQ(w.send(std::as_bytes(std::span(data)), w.rank(), 3).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(w.barrier().is_ok());
}

TEST(MpiCommunicator, ProcessGroupsOfTwoLayouts) {
  D0_REQUIRE_TWO_RANKS();
  auto world = std::shared_ptr<dist::Communicator>(test_world(), [](dist::Communicator*) {});
  auto tp = dist::make_process_groups(world, {.tp = 2});
  ASSERT_TRUE(tp.is_ok()) << tp.status().to_string();
  EXPECT_EQ(tp->tp->size(), 2);
  EXPECT_EQ(tp->tp->rank(), world->rank());
  EXPECT_EQ(tp->pp->size(), 1);
  EXPECT_EQ(tp->coords.tp, world->rank());
  auto pp = dist::make_process_groups(world, {.pp = 2});
  ASSERT_TRUE(pp.is_ok()) << pp.status().to_string();
  EXPECT_EQ(pp->tp->size(), 1);
  EXPECT_EQ(pp->pp->size(), 2);
  EXPECT_EQ(pp->coords.pp, world->rank());
  EXPECT_EQ(pp->stage->size(), 1);  // a stage of TP 1 x EP 1
  auto ep = dist::make_process_groups(world, {.ep = 2});
  ASSERT_TRUE(ep.is_ok()) << ep.status().to_string();
  EXPECT_EQ(ep->ep->size(), 2);
  EXPECT_EQ(ep->tp->size(), 1);
  EXPECT_EQ(ep->coords.ep, world->rank());
  EXPECT_EQ(ep->stage->size(), 2);  // the TP x EP ranks that sum partial MoE outputs
  EXPECT_EQ(ep->stage->rank(), world->rank());
  // The TP group works on its own: a sum over it.
  std::vector<float> one = {1.0f};
  ASSERT_TRUE(tp->tp->all_reduce_sum(one).is_ok());
  EXPECT_EQ(one[0], 2.0f);
  const Status mismatch = dist::make_process_groups(world, {.tp = 3}).status();
  EXPECT_EQ(mismatch.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.message().find("started 2 ranks"), std::string::npos) << mismatch.message();
}

TEST(MpiCommunicator, HungPeerBecomesAnErrorNamingItWithinTheDeadline) {
  D0_REQUIRE_TWO_RANKS();
  // A world of its own with a 1.5 s deadline; rank 1 stays away from MPI for 3 s (hung).
  auto quick = dist::open_mpi_world({.timeout_seconds = 1.5, .heartbeat_seconds = 0.05});
  ASSERT_TRUE(quick.is_ok()) << quick.status().to_string();
  dist::Communicator& g = **quick;
  if (g.rank() == 0) {
    const auto start = std::chrono::steady_clock::now();
    const Status st = g.barrier();
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(st.code(), StatusCode::kIoError);
    EXPECT_NE(st.message().find("barrier timed out"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("rank 1 of 2 silent"), std::string::npos) << st.message();
    EXPECT_LT(waited, 2.5);
    // The group is unusable from now on, and says so at once.
    std::vector<float> x(1);
    const Status after = g.all_reduce_sum(x);
    EXPECT_NE(after.message().find("unusable"), std::string::npos) << after.message();
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(3000));
    EXPECT_TRUE(g.barrier().is_ok());  // matches rank 0's barrier, still posted
  }
  ASSERT_TRUE(test_world()->barrier().is_ok());
}

}  // namespace
}  // namespace day0::testing
