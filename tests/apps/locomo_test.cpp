// The LoCoMo reader and renderer on hand-written conversations: exact rendered text and turn
// spans, the accepted file shapes, and one malformed file per rule (each an error naming the
// offending key, never a crash).
#include "eval/locomo.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace kvmem::eval {
namespace {

// Session 2 comes first in the file and session_3 has a date but no turns (as in the release);
// one text has a trailing line break and an inner one, one turn shares a photo.
constexpr const char* kConversation = R"({
  "speaker_a": "Ann",
  "speaker_b": "Bo",
  "session_2_date_time": "9:00 am on 2 May, 2023",
  "session_2": [
    {"speaker": "Bo", "dia_id": "D2:1", "text": "Back again."}
  ],
  "session_1_date_time": "1:56 pm on 8 May, 2023",
  "session_1": [
    {"speaker": "Ann", "dia_id": "D1:1", "text": "Hi Bo!\n\nHow are you?\n"},
    {"speaker": "Bo", "dia_id": "D1:2", "text": "Look  at this.", "img_url": ["http://x/y.jpg"],
     "blip_caption": "a photo of a dog", "query": "dog"},
    {"speaker": "Ann", "dia_id": "D1:3", "text": "", "blip_caption": "a photo of a cat"}
  ],
  "session_3_date_time": "noon on 9 May, 2023",
  "events_session_1": {"Ann": []},
  "session_1_observation": {"Ann": [["x", "D1:1"]]},
  "qa": [
    {"question": "Who has a dog?", "answer": "Bo", "evidence": ["D1:2"], "category": 4},
    {"question": "Which year?", "answer": 2023, "evidence": [], "category": 2},
    {"question": "What did Ann lose?", "adversarial_answer": "keys", "evidence": ["D1:1"],
     "category": 5}
  ]
})";

constexpr const char* kExpectedText =
    "Session 1, 1:56 pm on 8 May, 2023\n"
    "Ann: Hi Bo! How are you?\n"
    "Bo: Look  at this. [shares a photo of a dog]\n"
    "Ann: [shares a photo of a cat]\n"
    "\n"
    "Session 2, 9:00 am on 2 May, 2023\n"
    "Bo: Back again.\n";

LocomoConversation ParseOne(const std::string& json) {
  auto r = ParseLocomo(json, "conv-x");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok() || r->size() != 1) return {};
  return (*r)[0];
}

TEST(Locomo, ParsesSessionsTurnsAndQa) {
  LocomoConversation c = ParseOne(kConversation);
  EXPECT_EQ(c.id, "conv-x");
  EXPECT_EQ(c.speaker_a, "Ann");
  EXPECT_EQ(c.speaker_b, "Bo");
  ASSERT_EQ(c.sessions.size(), 2u);
  EXPECT_EQ(c.sessions[0].number, 1);
  EXPECT_EQ(c.sessions[0].date_time, "1:56 pm on 8 May, 2023");
  ASSERT_EQ(c.sessions[0].turns.size(), 3u);
  EXPECT_EQ(c.sessions[0].turns[1].dia_id, "D1:2");
  EXPECT_EQ(c.sessions[0].turns[1].blip_caption, "a photo of a dog");
  EXPECT_EQ(c.sessions[1].number, 2);
  ASSERT_EQ(c.qa.size(), 3u);
  EXPECT_EQ(c.qa[0].answer, "Bo");
  EXPECT_EQ(c.qa[0].evidence, std::vector<std::string>{"D1:2"});
  EXPECT_EQ(c.qa[1].answer, "2023");
  EXPECT_EQ(c.qa[2].category, 5);
  EXPECT_EQ(c.qa[2].answer, "");
  EXPECT_EQ(c.qa[2].adversarial_answer, "keys");
}

TEST(Locomo, RendersExactDialogueWithTurnSpans) {
  const RenderedConversation r = RenderConversation(ParseOne(kConversation));
  EXPECT_EQ(r.text, kExpectedText);
  ASSERT_EQ(r.turns.size(), 4u);
  const char* lines[] = {"Ann: Hi Bo! How are you?", "Bo: Look  at this. [shares a photo of a dog]",
                         "Ann: [shares a photo of a cat]", "Bo: Back again."};
  const char* ids[] = {"D1:1", "D1:2", "D1:3", "D2:1"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(r.turns[i].dia_id, ids[i]);
    EXPECT_EQ(r.text.substr(r.turns[i].begin, r.turns[i].end - r.turns[i].begin), lines[i]);
  }
}

// Two copies of the conversation as one history: sessions 1-4, the second copy's turns renamed
// D3:1.., its evidence following them; --limit applies to each source conversation.
TEST(Locomo, ConcatenatesConversationsIntoOneHistory) {
  LocomoConversation a = ParseOne(kConversation), b = ParseOne(kConversation);
  b.id = "conv-y";
  const LocomoConversation c = ConcatConversations({a, b}, /*limit=*/1);
  EXPECT_EQ(c.id, "conv-x+conv-y");
  ASSERT_EQ(c.sessions.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(c.sessions[i].number, i + 1);
  EXPECT_EQ(c.sessions[2].turns[1].dia_id, "D3:2");
  EXPECT_EQ(c.sessions[3].turns[0].dia_id, "D4:1");
  ASSERT_EQ(c.qa.size(), 2u);
  EXPECT_EQ(c.qa[0].evidence, std::vector<std::string>{"D1:2"});
  EXPECT_EQ(c.qa[1].evidence, std::vector<std::string>{"D3:2"});
  // The rendered history is both renders with the second's session numbers moved by two.
  std::string second = kExpectedText;
  second.replace(second.find("Session 1"), 9, "Session 3");
  second.replace(second.find("Session 2"), 9, "Session 4");
  EXPECT_EQ(RenderConversation(c).text, std::string(kExpectedText) + "\n" + second);
  EXPECT_EQ(ConcatConversations({a, b}, 0).qa.size(), 6u);
  // Evidence that names no turn stays unmatched, under a name no turn has.
  a.qa[0].evidence = {"D9:9"};
  EXPECT_EQ(ConcatConversations({a}, 1).qa[0].evidence, std::vector<std::string>{"conv-x/D9:9"});
}

TEST(Locomo, AcceptsWrappedSamplesAndArrays) {
  const std::string conv = R"({"speaker_a": "A", "speaker_b": "B", "session_1_date_time": "d",
    "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "t"}]})";
  const std::string wrapped = R"({"sample_id": "conv-7", "qa": [], "conversation": )" + conv + "}";
  auto r = ParseLocomo("[" + conv + "," + wrapped + "]", "file");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].id, "file#0");
  EXPECT_EQ((*r)[1].id, "conv-7");
  EXPECT_EQ(RenderConversation((*r)[1]).text, "Session 1, d\nA: t\n");
}

struct BadCase {
  const char* name;
  std::string json;
  const char* message_part;  // the error must name this
};

TEST(Locomo, MalformedInputIsAnErrorNamingTheProblem) {
  const std::string head = R"({"speaker_a": "A", "speaker_b": "B", "session_1_date_time": "d", )";
  const std::string turn = R"({"speaker": "A", "dia_id": "D1:1", "text": "t"})";
  const BadCase cases[] = {
      {"empty", "", "not valid JSON"},
      {"truncated", head + R"("session_1": [)" + turn, "not valid JSON"},
      {"garbage", "{\"speaker_a\": \"A\" \x01}", "not valid JSON"},
      {"number", "42", "must be an object"},
      {"empty array", "[]", "empty array"},
      {"array of junk", "[1]", "conv-x#0 must be an object"},
      {"no speaker_a", R"({"speaker_b": "B"})", "missing 'speaker_a'"},
      {"speaker not string", R"({"speaker_a": 1, "speaker_b": "B"})", "speaker_a must be a string"},
      {"no sessions", R"({"speaker_a": "A", "speaker_b": "B"})", "no session_N with turns"},
      {"session not array", head + R"("session_1": {}})", "session_1 must be an array"},
      {"turn not object", head + R"("session_1": [3]})", "session_1[0] must be an object"},
      {"no text", head + R"("session_1": [{"speaker": "A", "dia_id": "D1:1"}]})",
       "session_1[0]: missing 'text'"},
      {"text not string", head + R"("session_1": [{"speaker": "A", "dia_id": "x", "text": []}]})",
       "session_1[0].text must be a string"},
      {"caption not string",
       head + R"("session_1": [{"speaker": "A", "dia_id": "x", "text": "t", "blip_caption": 5}]})",
       "blip_caption must be a string"},
      {"no date", R"({"speaker_a": "A", "speaker_b": "B", "session_2": [)" + turn + "]}",
       "missing 'session_2_date_time'"},
      {"leading zero", head + R"("session_01": [)" + turn + "]}", "bad session key 'session_01'"},
      {"huge session", head + R"("session_99999999999": [)" + turn + "]}", "bad session key"},
      {"qa not array", head + R"("session_1": [)" + turn + R"(], "qa": {}})", "qa must be an array"},
      {"qa no category", head + R"("session_1": [)" + turn + R"(], "qa": [{"question": "q"}]})",
       "qa[0]: missing 'category'"},
      {"qa bad category",
       head + R"("session_1": [)" + turn + R"(], "qa": [{"question": "q", "category": 9}]})",
       "category 9 not in 1..5"},
      {"qa answer object",
       head + R"("session_1": [)" + turn +
           R"(], "qa": [{"question": "q", "answer": {}, "category": 1}]})",
       "answer must be a string or a number"},
      {"evidence not strings",
       head + R"("session_1": [)" + turn +
           R"(], "qa": [{"question": "q", "evidence": [1], "category": 1}]})",
       "evidence[] must be a string"},
      {"deep nesting", std::string(100000, '[') + std::string(100000, ']'), "conv-x#0"},
  };
  for (const BadCase& c : cases) {
    auto r = ParseLocomo(c.json, "conv-x");
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument) << c.name;
    EXPECT_NE(r.status().message().find(c.message_part), std::string::npos)
        << c.name << ": " << r.status().ToString();
  }
}

TEST(Locomo, EveryTruncationFailsCleanly) {
  const std::string full = kConversation;
  for (size_t n = 0; n < full.size(); ++n) {
    auto r = ParseLocomo(std::string_view(full).substr(0, n), "conv-x");
    // Every proper prefix is broken JSON.
    ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes parsed";
  }
}

TEST(Locomo, LoadsFilesAndResolvesDirectories) {
  namespace fs = std::filesystem;
  char tmpl[] = "/tmp/kvmem_locomo_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path dir = tmpl;
  std::ofstream(dir / "b.json") << kConversation;
  std::ofstream(dir / "a.json") << "{broken";
  std::ofstream(dir / "notes.txt") << "not data";

  auto files = ResolveLocomoFiles({dir.string()});
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ(*files, (std::vector<std::string>{(dir / "a.json").string(), (dir / "b.json").string()}));

  auto good = LoadLocomoFile((dir / "b.json").string());
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ((*good)[0].id, "b");
  auto bad = LoadLocomoFile((dir / "a.json").string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("a.json"), std::string::npos);
  auto missing = LoadLocomoFile((dir / "none.json").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kIo);

  const fs::path empty = dir / "empty";
  fs::create_directory(empty);
  EXPECT_EQ(ResolveLocomoFiles({empty.string()}).status().code(), ErrorCode::kNotFound);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvmem::eval
