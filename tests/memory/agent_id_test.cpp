// Agent ids and tenants: what an id may be (any UTF-8 string of 1..256 bytes without control
// characters), tenants' narrow alphabet, and directory names that are keyed hashes: [0-9a-f]{32},
// injective over many random ids, different under another secret, and never the id itself.
#include "memory/store/agent_id.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "memory/store/hash.h"

namespace kvmem::memory::store {
namespace {

NameSecret Secret(uint8_t fill) {
  NameSecret s;
  s.fill(fill);
  return s;
}

void ExpectBadId(const std::string& id, const std::string& needle) {
  Status st = ValidateAgentKey({"tenant", id});
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << id;
  EXPECT_NE(st.message().find("agent id"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
}

TEST(AgentIdTest, AcceptsWhatClientsSend) {
  for (const std::string& id : std::vector<std::string>{
           "planner-1.v2_beta", "alice@example.com", "Ada Lovelace", "a/b", "../x", "/etc/passwd",
           ".", "..", "caf\xc3\xa9", "\xe7\x94\xa8\xe6\x88\xb7 \xf0\x9f\xa4\x97", "%2F", "a:b",
           std::string(kMaxAgentIdBytes, 'a')}) {
    EXPECT_TRUE(ValidateAgentKey({"t", id}).ok()) << id;
  }
}

TEST(AgentIdTest, RejectsBadIds) {
  ExpectBadId("", "is empty");
  ExpectBadId(std::string(kMaxAgentIdBytes + 1, 'a'), "is 257 bytes long; at most 256");
  ExpectBadId("a\nb", "control character at byte 1");
  ExpectBadId(std::string("a\0b", 3), "control character at byte 1");
  ExpectBadId("tab\there", "control character");
  ExpectBadId("del\x7f", "control character");
  ExpectBadId("c1\xc2\x85", "control character");  // U+0085, NEXT LINE
  ExpectBadId("caf\xe9", "not valid UTF-8");
  ExpectBadId("\xed\xa0\x80", "not valid UTF-8");  // a surrogate
}

TEST(AgentIdTest, TenantsKeepTheNarrowAlphabet) {
  EXPECT_TRUE(ValidateTenant("acme-1.prod_x").ok());
  for (const std::string& bad :
       std::vector<std::string>{"", ".", "..", "a/b", "a b", "caf\xc3\xa9", std::string(65, 'a')}) {
    const Status st = ValidateAgentKey({bad, "ok"});
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << bad;
    EXPECT_TRUE(st.message().starts_with("tenant")) << st.message();
  }
}

TEST(AgentIdTest, DirectoryNameIsAKeyedHash) {
  const NameSecret s = Secret(7);
  const std::string a = AgentDirName({"t1", "agent"}, s);
  EXPECT_TRUE(IsXxh128Hex(a)) << a;
  EXPECT_EQ(a, AgentDirName({"t1", "agent"}, s));
  EXPECT_NE(a, AgentDirName({"t2", "agent"}, s));
  EXPECT_NE(a, AgentDirName({"t1", "agent"}, Secret(8)));  // the secret keys it
  EXPECT_NE(a, LegacyAgentDirName({"t1", "agent"}));
  // The separator keeps (tenant, id) splits apart even though ids may hold '/'.
  EXPECT_NE(AgentDirName({"ab", "c"}, s), AgentDirName({"a", "bc"}, s));
  EXPECT_NE(AgentDirName({"a", "b/c"}, s), AgentDirName({"a", "b"}, s));
  EXPECT_EQ(LegacyAgentDirName({"t1", "agent"}), Xxh128Hex(std::string_view("t1/agent")));
}

// Property: over random ids (any bytes that validate, lengths 1..256, many differing from
// another in one byte), every name is [0-9a-f]{32} and no two ids share one.
TEST(AgentIdTest, NamesAreInjectiveAndSafeOnRandomIds) {
  std::mt19937_64 rng(42);
  const NameSecret s = Secret(1);
  std::set<std::string> ids, names;
  std::string prev = "x";
  for (int i = 0; i < 20000; ++i) {
    std::string id;
    if (i % 2 == 1) {  // a neighbour of the previous id: one byte changed
      id = prev;  // an ASCII byte of it, so the id stays UTF-8 (every id has one)
      size_t pos = rng() % id.size();
      while (static_cast<unsigned char>(id[pos]) >= 0x80) pos = rng() % id.size();
      id[pos] = static_cast<char>(0x20 + rng() % 0x5f);
    } else {
      const size_t n = 1 + rng() % kMaxAgentIdBytes;
      for (size_t j = 0; j < n; ++j) id.push_back(static_cast<char>(0x20 + rng() % 0x5f));
      if (i % 4 == 0) id = "\xf0\x9f\xa4\x97" + id.substr(0, kMaxAgentIdBytes - 4);
    }
    ASSERT_TRUE(ValidateAgentId(id).ok()) << id;
    prev = id;
    if (!ids.insert(id).second) continue;
    const std::string name = AgentDirName({"tenant", id}, s);
    ASSERT_EQ(name.size(), 32u);
    ASSERT_EQ(name.find_first_not_of("0123456789abcdef"), std::string::npos) << name;
    ASSERT_TRUE(names.insert(name).second) << "two ids share " << name;
  }
  EXPECT_EQ(ids.size(), names.size());
  EXPECT_GT(ids.size(), 19000u);
}

}  // namespace
}  // namespace kvmem::memory::store
