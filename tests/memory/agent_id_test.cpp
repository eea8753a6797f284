// Agent ids and tenants: the allowed alphabet and length, dot-only names, and directory names
// that are hashes (never the id itself) and differ across tenants.
#include "memory/store/agent_id.h"

#include <gtest/gtest.h>

#include <string>

#include "memory/store/hash.h"

namespace kvmem::memory::store {
namespace {

void ExpectBadId(const std::string& id, const std::string& needle) {
  Status st = ValidateAgentKey({"tenant", id});
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << id;
  EXPECT_NE(st.message().find("agent id"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
}

TEST(AgentIdTest, AcceptsTheAlphabet) {
  EXPECT_TRUE(ValidateAgentKey({"acme", "planner-1.v2_beta"}).ok());
  EXPECT_TRUE(ValidateAgentKey({"t", std::string(64, 'a')}).ok());
  EXPECT_TRUE(ValidateAgentKey({"t", ".hidden"}).ok());
  EXPECT_TRUE(ValidateAgentKey({"t", "a..b"}).ok());
}

TEST(AgentIdTest, RejectsBadIds) {
  ExpectBadId("", "is empty");
  ExpectBadId(".", "dots only");
  ExpectBadId("..", "dots only");
  ExpectBadId("...", "dots only");
  ExpectBadId("a/b", "contains '/'");
  ExpectBadId("../etc", "contains '/'");
  ExpectBadId(std::string(200, 'a'), "is 200 characters long; at most 64");
  ExpectBadId("a\nb", "contains '\\x0a'");
  ExpectBadId(std::string("a\0b", 3), "contains '\\x00'");
  ExpectBadId("tab\there", "contains '\\x09'");
  ExpectBadId("caf\xc3\xa9", "contains '\\xc3'");
  ExpectBadId("a b", "contains ' '");
  Status st = ValidateAgentKey({"..", "ok"});
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tenant"), std::string::npos) << st.message();
}

TEST(AgentIdTest, DirectoryNameIsAHash) {
  const std::string a = AgentDirName({"t1", "agent"});
  EXPECT_TRUE(IsXxh128Hex(a)) << a;
  EXPECT_EQ(a, AgentDirName({"t1", "agent"}));
  EXPECT_NE(a, AgentDirName({"t2", "agent"}));
  // The separator keeps (tenant, id) splits apart.
  EXPECT_NE(AgentDirName({"ab", "c"}), AgentDirName({"a", "bc"}));
  EXPECT_EQ(a, Xxh128Hex(std::string_view("t1/agent")));
}

}  // namespace
}  // namespace kvmem::memory::store
