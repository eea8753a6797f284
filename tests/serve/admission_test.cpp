// Admission (serve/admission.h) without HTTP: the running and queue limits, round-robin by
// tenant then agent, one running request per agent, leaving the queue; and ClientConnection
// (serve/client_connection.h) on a real TCP connection.
#include "serve/admission.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "serve/client_connection.h"

namespace kvmem::serve {
namespace {

using namespace std::chrono_literals;

template <typename F>
bool Eventually(F done) {
  for (int i = 0; i < 2000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return done();
}

// Requests that queue one after another (each thread starts once the previous one is queued,
// so arrival order is known) and, once admitted, note their name and give the place back.
class Queue {
 public:
  explicit Queue(Admission* a) : a_(a) {}
  ~Queue() {
    for (auto& t : threads_) t.join();
  }

  void Add(const std::string& tenant, const std::string& agent, const std::string& name) {
    const int64_t before = a_->counts().queued;
    threads_.emplace_back([this, tenant, agent, name] {
      Admission::Ticket t;
      if (a_->Enter(tenant, agent, nullptr, &t) != Admission::Outcome::kAdmitted) return;
      std::lock_guard<std::mutex> l(mu_);
      order_.push_back(name);
    });
    ASSERT_TRUE(Eventually([&] { return a_->counts().queued == before + 1; }));
  }
  std::vector<std::string> Wait() {
    for (auto& t : threads_) t.join();
    threads_.clear();
    return order_;
  }

 private:
  Admission* a_;
  std::mutex mu_;
  std::vector<std::string> order_;
  std::vector<std::thread> threads_;
};

TEST(Admission, RunsQueuesThenRefuses) {
  Admission a({.max_running = 2, .max_queue = 1});
  Admission::Ticket t1, t2;
  EXPECT_EQ(a.Enter("t", "a", nullptr, &t1), Admission::Outcome::kAdmitted);
  EXPECT_EQ(a.Enter("t", "b", nullptr, &t2), Admission::Outcome::kAdmitted);
  std::atomic<bool> third{false};
  std::thread waiter([&] {
    Admission::Ticket t3;
    EXPECT_EQ(a.Enter("t", "c", nullptr, &t3), Admission::Outcome::kAdmitted);
    third = true;
  });
  ASSERT_TRUE(Eventually([&] { return a.counts().queued == 1; }));
  Admission::Ticket t4;
  EXPECT_EQ(a.Enter("u", "d", nullptr, &t4), Admission::Outcome::kFull);
  EXPECT_FALSE(t4.held());
  EXPECT_EQ(a.counts().running, 2);
  EXPECT_EQ(a.counts().refused, 1u);
  EXPECT_FALSE(third.load());
  t1 = Admission::Ticket();  // gives its place to the queued one
  waiter.join();
  EXPECT_TRUE(third.load());
  t2 = Admission::Ticket();
  EXPECT_EQ(a.counts().running, 0);
  EXPECT_EQ(a.counts().queued, 0);
}

TEST(Admission, ZeroQueueRefusesAtOnce) {
  Admission a({.max_running = 1, .max_queue = 0});
  Admission::Ticket t1, t2;
  EXPECT_EQ(a.Enter("t", "", nullptr, &t1), Admission::Outcome::kAdmitted);
  EXPECT_EQ(a.Enter("t", "", nullptr, &t2), Admission::Outcome::kFull);
}

// Tenant A's five queued agents do not keep tenant B's one request waiting behind them.
TEST(Admission, AnotherTenantIsNotStarved) {
  Admission a({.max_running = 1, .max_queue = 16});
  Admission::Ticket running;
  ASSERT_EQ(a.Enter("A", "a0", nullptr, &running), Admission::Outcome::kAdmitted);
  Queue q(&a);
  for (int i = 1; i <= 5; ++i) q.Add("A", "a" + std::to_string(i), "a" + std::to_string(i));
  q.Add("B", "b1", "b1");
  running = Admission::Ticket();
  EXPECT_EQ(q.Wait(), (std::vector<std::string>{"b1", "a1", "a2", "a3", "a4", "a5"}));
}

TEST(Admission, RoundRobinByTenantThenAgent) {
  Admission a({.max_running = 1, .max_queue = 16});
  Admission::Ticket running;
  ASSERT_EQ(a.Enter("C", "c", nullptr, &running), Admission::Outcome::kAdmitted);
  Queue q(&a);
  // A's agent x sends three, y one; B's agent z two: A and B alternate, and within A, x and y.
  q.Add("A", "x", "x1");
  q.Add("A", "x", "x2");
  q.Add("A", "x", "x3");
  q.Add("A", "y", "y1");
  q.Add("B", "z", "z1");
  q.Add("B", "z", "z2");
  running = Admission::Ticket();
  EXPECT_EQ(q.Wait(), (std::vector<std::string>{"x1", "z1", "y1", "z2", "x2", "x3"}));
}

TEST(Admission, OneRunningRequestPerAgent) {
  Admission a({.max_running = 4, .max_queue = 4});
  Admission::Ticket first;
  ASSERT_EQ(a.Enter("t", "same", nullptr, &first), Admission::Outcome::kAdmitted);
  std::atomic<bool> second{false};
  std::thread t([&] {
    Admission::Ticket t2;
    EXPECT_EQ(a.Enter("t", "same", nullptr, &t2), Admission::Outcome::kAdmitted);
    second = true;
  });
  ASSERT_TRUE(Eventually([&] { return a.counts().queued == 1; }));
  Admission::Ticket other, anonymous1, anonymous2;  // other agents and anonymous ones still run
  EXPECT_EQ(a.Enter("t", "other", nullptr, &other), Admission::Outcome::kAdmitted);
  EXPECT_EQ(a.Enter("t", "", nullptr, &anonymous1), Admission::Outcome::kAdmitted);
  EXPECT_FALSE(second.load());
  first = Admission::Ticket();
  t.join();
  EXPECT_TRUE(second.load());
}

TEST(Admission, AWaiterLeavesTheQueue) {
  Admission a({.max_running = 1, .max_queue = 4});
  Admission::Ticket running;
  ASSERT_EQ(a.Enter("t", "a", nullptr, &running), Admission::Outcome::kAdmitted);
  std::atomic<bool> gone{false};
  std::thread t([&] {
    Admission::Ticket t2;
    EXPECT_EQ(a.Enter(
                  "t", "b", [&] { return gone.load(); }, &t2),
              Admission::Outcome::kLeft);
    EXPECT_FALSE(t2.held());
  });
  ASSERT_TRUE(Eventually([&] { return a.counts().queued == 1; }));
  gone = true;
  t.join();
  EXPECT_EQ(a.counts().queued, 0);
  EXPECT_EQ(a.counts().refused, 0u);
  running = Admission::Ticket();
  EXPECT_EQ(a.counts().running, 0);
}

// A loopback connection: the server's end is watched, the client's is closed.
TEST(ClientConnection, NoticesTheClientHangingUp) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int client = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  sockaddr_in peer{};
  len = sizeof(peer);
  const int server = accept(listener, reinterpret_cast<sockaddr*>(&peer), &len);
  ASSERT_GE(server, 0);

  // Only the socket this thread serves is looked at: no other descriptor of the process (which
  // other threads open and close) is probed (a race ThreadSanitizer found in a /proc scan).
  EXPECT_FALSE(
      ClientConnection::Find("127.0.0.1", ntohs(addr.sin_port), "127.0.0.1", ntohs(peer.sin_port))
          .watched());
  const ClientConnection::Serving serving(server);
  EXPECT_FALSE(ClientConnection::Find("127.0.0.1", ntohs(addr.sin_port), "127.0.0.1", 1).watched());
  ClientConnection c =
      ClientConnection::Find("127.0.0.1", ntohs(addr.sin_port), "127.0.0.1", ntohs(peer.sin_port));
  ASSERT_TRUE(c.watched());
  EXPECT_FALSE(c.Gone());
  ASSERT_EQ(write(client, "GET / HTTP/1.1\r\n", 16), 16);  // a pipelined request is not a hang-up
  EXPECT_FALSE(c.Gone());
  close(client);
  EXPECT_TRUE(Eventually([&] { return c.Gone(); }));
  EXPECT_TRUE(c.Gone());  // sticky
  EXPECT_FALSE(ClientConnection().Gone());
  close(server);
  close(listener);
}

}  // namespace
}  // namespace kvmem::serve
