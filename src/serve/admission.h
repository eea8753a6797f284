// Admission of generation requests: at most max_running run at once, at most max_queue more
// wait, and the rest are refused at once (429 OpenAI / 529 Anthropic, with Retry-After) rather
// than queued without bound.
//
// Fairness: a freed place goes to the tenant served least recently, then within it to the agent
// served least recently, then to that agent's oldest request: round-robin by tenant, then by
// agent, so one tenant's many agents cannot starve another tenant's one. An agent runs one
// request at a time (each continues the KV cache the previous one left, so a second one could
// only wait inside the backend holding a running place); its later requests wait here, in
// arrival order. Requests without an agent have no such order and only take turns by tenant.
//
// A waiting request leaves the queue when its client goes away or the server stops (Enter
// polls for both every kPollInterval).
//
// Thread-safety: every method may be called from many threads.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace kvmem::serve {

struct AdmissionLimits {
  int max_running = 16;  // generation requests running at once
  int max_queue = 64;    // requests waiting beyond them; 0: refuse at once when full
};

struct AdmissionCounts {
  int64_t running = 0;
  int64_t queued = 0;
  uint64_t refused = 0;  // since start: turned away because running and queue were full
};

class Admission {
 public:
  static constexpr std::chrono::milliseconds kPollInterval{20};

  explicit Admission(AdmissionLimits limits);
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;

  // A running place; gives it to the next waiting request when destroyed.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept
        : admission_(std::exchange(other.admission_, nullptr)),
          tenant_(std::move(other.tenant_)),
          key_(std::move(other.key_)),
          exclusive_(other.exclusive_) {}
    Ticket& operator=(Ticket&& other) noexcept;
    ~Ticket();
    bool held() const { return admission_ != nullptr; }

   private:
    friend class Admission;
    void Reset();
    Admission* admission_ = nullptr;
    std::string tenant_;
    std::string key_;         // tenant '/' agent id
    bool exclusive_ = false;  // has an agent: one request of it runs at a time
  };

  enum class Outcome { kAdmitted, kFull, kLeft };

  // Admits the request of `tenant`'s agent `agent` ("" for none) at once, or queues it and
  // blocks until it is admitted or `leave` (polled) returns true. kFull when running and queue
  // are full (nothing waits); kLeft when it left the queue. The ticket is held only when
  // kAdmitted.
  Outcome Enter(const std::string& tenant, const std::string& agent,
                const std::function<bool()>& leave, Ticket* ticket);

  AdmissionCounts counts() const;
  const AdmissionLimits& limits() const { return limits_; }

 private:
  struct Waiter {
    std::string tenant;
    std::string key;  // tenant '/' agent id ("" without an agent)
    bool exclusive = false;
    uint64_t arrival = 0;
    bool admitted = false;
  };

  void Release(const Ticket& ticket);
  // Admits waiters while places are free; call with mu_ held.
  void AdmitWaiting();
  // The waiter that gets the next place (fairness above); end() when none may run now.
  std::list<Waiter*>::iterator NextWaiter();
  void Arrive(const Waiter& w);
  void Depart(const std::string& tenant, const std::string& key);

  const AdmissionLimits limits_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::list<Waiter*> waiting_;  // in arrival order
  int64_t running_ = 0;
  uint64_t refused_ = 0;
  uint64_t arrivals_ = 0;
  uint64_t admissions_ = 0;
  // When each tenant and agent was last admitted (admissions_ then); kept while it has requests
  // running or waiting, so one that comes back after idling starts at the front.
  std::map<std::string, uint64_t> tenant_served_;
  std::map<std::string, uint64_t> agent_served_;
  std::map<std::string, int> tenant_active_;   // running + waiting, per tenant
  std::map<std::string, int> agent_active_;    // running + waiting, per agent key
  std::map<std::string, bool> agent_running_;  // agents (with an id) that have a request running
};

}  // namespace kvmem::serve
