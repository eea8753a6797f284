#include "serve/admission.h"

#include <tuple>

namespace kvmem::serve {

Admission::Ticket& Admission::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    Reset();
    admission_ = std::exchange(other.admission_, nullptr);
    tenant_ = std::move(other.tenant_);
    key_ = std::move(other.key_);
    exclusive_ = other.exclusive_;
  }
  return *this;
}

Admission::Ticket::~Ticket() { Reset(); }

void Admission::Ticket::Reset() {
  if (admission_ == nullptr) return;
  admission_->Release(*this);
  admission_ = nullptr;
}

Admission::Admission(AdmissionLimits limits) : limits_(limits) {}

Admission::Outcome Admission::Enter(const std::string& tenant, const std::string& agent,
                                    const std::function<bool()>& leave, Ticket* ticket) {
  Waiter w{.tenant = tenant, .key = tenant + "/" + agent, .exclusive = !agent.empty()};
  const auto grant = [&] {
    ticket->admission_ = this;
    ticket->tenant_ = w.tenant;
    ticket->key_ = w.key;
    ticket->exclusive_ = w.exclusive;
  };
  std::unique_lock<std::mutex> l(mu_);
  w.arrival = arrivals_++;
  Arrive(w);
  waiting_.push_back(&w);
  AdmitWaiting();
  if (w.admitted) {
    grant();
    return Outcome::kAdmitted;
  }
  if (waiting_.size() > static_cast<size_t>(limits_.max_queue)) {
    waiting_.remove(&w);
    Depart(w.tenant, w.key);
    ++refused_;
    return Outcome::kFull;
  }
  while (!w.admitted) {
    l.unlock();
    const bool gone = leave && leave();
    l.lock();
    if (gone) {
      if (w.admitted) {
        grant();
        l.unlock();
        *ticket = Ticket();  // gives the place on at once
        return Outcome::kLeft;
      }
      waiting_.remove(&w);
      Depart(w.tenant, w.key);
      return Outcome::kLeft;
    }
    cv_.wait_for(l, kPollInterval, [&] { return w.admitted; });
  }
  grant();
  return Outcome::kAdmitted;
}

void Admission::Release(const Ticket& ticket) {
  std::lock_guard<std::mutex> l(mu_);
  --running_;
  if (ticket.exclusive_) agent_running_.erase(ticket.key_);
  Depart(ticket.tenant_, ticket.key_);
  AdmitWaiting();
}

void Admission::AdmitWaiting() {
  bool any = false;
  while (running_ < limits_.max_running) {
    const auto it = NextWaiter();
    if (it == waiting_.end()) break;
    Waiter* w = *it;
    waiting_.erase(it);
    w->admitted = true;
    ++running_;
    if (w->exclusive) agent_running_[w->key] = true;
    ++admissions_;
    tenant_served_[w->tenant] = admissions_;
    agent_served_[w->key] = admissions_;
    any = true;
  }
  if (any) cv_.notify_all();
}

std::list<Admission::Waiter*>::iterator Admission::NextWaiter() {
  const auto served = [](const std::map<std::string, uint64_t>& m, const std::string& k) {
    const auto it = m.find(k);
    return it == m.end() ? uint64_t{0} : it->second;
  };
  auto best = waiting_.end();
  std::tuple<uint64_t, uint64_t, uint64_t> best_rank{};
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    const Waiter& w = **it;
    if (w.exclusive && agent_running_.contains(w.key)) continue;
    const std::tuple<uint64_t, uint64_t, uint64_t> rank{served(tenant_served_, w.tenant),
                                                        served(agent_served_, w.key), w.arrival};
    if (best == waiting_.end() || rank < best_rank) {
      best = it;
      best_rank = rank;
    }
  }
  return best;
}

void Admission::Arrive(const Waiter& w) {
  ++tenant_active_[w.tenant];
  ++agent_active_[w.key];
}

void Admission::Depart(const std::string& tenant, const std::string& key) {
  if (--tenant_active_[tenant] == 0) {
    tenant_active_.erase(tenant);
    tenant_served_.erase(tenant);
  }
  if (--agent_active_[key] == 0) {
    agent_active_.erase(key);
    agent_served_.erase(key);
  }
}

AdmissionCounts Admission::counts() const {
  std::lock_guard<std::mutex> l(mu_);
  return {
      .running = running_, .queued = static_cast<int64_t>(waiting_.size()), .refused = refused_};
}

}  // namespace kvmem::serve
