// The JSON-Schema compiler: for each schema, hand-written instances that must be accepted and
// others that must be refused (checked through the matcher), and the schemas it must refuse.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/grammar/json_schema.h"
#include "engine/grammar/matcher.h"

namespace kvmem::engine::grammar {
namespace {

struct Case {
  std::string schema;
  std::vector<std::string> valid;
  std::vector<std::string> invalid;
};

bool Accepts(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  Matcher m(g);
  return m.AcceptBytes(text) && m.IsComplete();
}

void Check(const Case& c) {
  auto g = CompileJsonSchema(c.schema);
  ASSERT_TRUE(g.ok()) << c.schema << "\n" << g.status().ToString() << "\n"
                      << JsonSchemaToGbnf(c.schema).value();
  for (const std::string& v : c.valid) {
    EXPECT_TRUE(Accepts(*g, v)) << "schema " << c.schema << "\nshould accept " << v << "\n"
                                << JsonSchemaToGbnf(c.schema).value();
  }
  for (const std::string& v : c.invalid) {
    EXPECT_FALSE(Accepts(*g, v)) << "schema " << c.schema << "\nshould refuse " << v;
  }
}

TEST(JsonSchema, Primitives) {
  Check({R"({"type": "string"})",
         {R"("")", R"("hi")", R"("a \"q\" \\ \/ \n \u00e9 é 😀")"},
         {R"(hi)", R"("a)", "\"a\nb\"", R"("\q")", R"("\u12")", R"( "x")", "\"x\" "}});
  Check({R"({"type": "integer"})",
         {"0", "-0", "42", "-17", "1234567890123456"},
         {"01", "1.5", "+1", "1e3", "", "-", "12345678901234567"}});
  Check({R"({"type": "number"})",
         {"0", "-1.5", "3.14159", "1e10", "2.5E-3", "-0.0e+1"},
         {".5", "1.", "1e", "--1", "0x10", "NaN"}});
  Check({R"({"type": "boolean"})", {"true", "false"}, {"True", "1", "null"}});
  Check({R"({"type": "null"})", {"null"}, {"nul", "None", "\"null\""}});
}

TEST(JsonSchema, AnyValueAndJsonObjectMode) {
  Check({R"({})", {"1", "\"s\"", "[1, {\"a\": null}]", "{\"k\": [true, false]}"}, {"", "[1,]"}});
  Check({"true", {"null", "{}"}, {"nul"}});
  auto g = CompileJsonObject();
  EXPECT_TRUE(Accepts(g, "{}"));
  EXPECT_TRUE(Accepts(g, "{\"a\": 1, \"b\": {\"c\": [1, 2.5, \"x\", null]}}"));
  EXPECT_TRUE(Accepts(g, "{\n  \"a\": [\n    1,\n    2\n  ]\n}"));
  EXPECT_FALSE(Accepts(g, "[1]"));
  EXPECT_FALSE(Accepts(g, "\"s\""));
  EXPECT_FALSE(Accepts(g, "{\"a\" 1}"));
  EXPECT_FALSE(Accepts(g, "{\"a\": 1,}"));
}

TEST(JsonSchema, WhitespaceIsBounded) {
  auto g = CompileJsonObject();
  EXPECT_TRUE(Accepts(g, "{\"a\":1}"));
  EXPECT_TRUE(Accepts(g, "{ \"a\" : 1 }"));
  EXPECT_TRUE(Accepts(g, "{\n" + std::string(40, ' ') + "\"a\": 1}"));
  EXPECT_FALSE(Accepts(g, "{\n" + std::string(41, ' ') + "\"a\": 1}"));
  EXPECT_FALSE(Accepts(g, "{  \"a\": 1}"));
  EXPECT_FALSE(Accepts(g, "{\n\n\"a\": 1}"));
  EXPECT_FALSE(Accepts(g, " {}"));
}

TEST(JsonSchema, ObjectPropertiesInOrderRequiredAndOptional) {
  const std::string schema = R"({"type": "object",
      "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
      "required": ["b"]})";
  Check({schema,
         {R"({"b": "x"})", R"({"a": 1, "b": "x"})", R"({"b": "x", "c": true})",
          R"({"a": 1, "b": "x", "c": false})", "{\n  \"a\": 1,\n  \"b\": \"x\"\n}"},
         {R"({})", R"({"a": 1})", R"({"b": "x", "a": 1})", R"({"b": 1})", R"({"b": "x",})",
          R"({"b": "x", "d": 1})", R"({"b": "x", "b": "y"})", R"({, "b": "x"})"}});
  // Every property optional: the empty object and any ordered subset.
  Check({R"({"properties": {"x": {"type": "null"}, "y": {"type": "null"}}})",
         {"{}", R"({"x": null})", R"({"y": null})", R"({"x": null, "y": null})"},
         {R"({"y": null, "x": null})", R"({"x": null,})", R"({, "y": null})"}});
}

TEST(JsonSchema, AdditionalProperties) {
  // true: extra properties (after the listed ones) with names that are not listed.
  const std::string open = R"({"type": "object", "properties": {"id": {"type": "integer"}},
      "required": ["id"], "additionalProperties": true})";
  Check({open,
         {R"({"id": 1})", R"({"id": 1, "note": "x", "n": [1]})", R"({"id": 1, "i": 2})",
          R"({"id": 1, "idx": 2})", R"({"id": 1, "": 0})"},
         {R"({"id": 1, "id": 2})", R"({"note": "x"})", R"({"id": 1, "note"})"}});
  // A schema for the extra values; no listed properties: a dictionary.
  Check({R"({"type": "object", "additionalProperties": {"type": "number"}})",
         {"{}", R"({"a": 1, "b": 2.5})"},
         {R"({"a": "x"})", R"({"a": 1, "b": null})"}});
  // false, and absent with listed properties: nothing else.
  Check({R"({"properties": {"k": {"const": 1}}, "additionalProperties": false})",
         {R"({"k": 1})", "{}"},
         {R"({"k": 1, "j": 1})", R"({"k": 2})"}});
  // Absent and no properties: any object.
  Check({R"({"type": "object"})", {"{}", R"({"z": [1, {"y": null}]})"}, {"[]"}});
  // Listed names with non-ASCII characters stay excluded from the extras.
  Check({R"({"properties": {"café": {"type": "integer"}}, "additionalProperties": true})",
         {R"({"café": 1})", R"({"café": 1, "caf": 2})", R"({"café": 1, "cafés": 2})",
          R"({"cafè": 2})"},
         {R"({"café": 1, "café": 2})", R"({"café": "x"})"}});
}

TEST(JsonSchema, Arrays) {
  Check({R"({"type": "array", "items": {"type": "integer"}})",
         {"[]", "[1]", "[1, 2, 3]", "[\n  1,\n  2\n]"},
         {"[1,]", "[,1]", "[\"a\"]", "[1 2]", "["}});
  Check({R"({"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 3})",
         {R"(["a", "b"])", R"(["a", "b", "c"])"},
         {"[]", R"(["a"])", R"(["a", "b", "c", "d"])"}});
  Check({R"({"type": "array", "minItems": 1})", {"[1]", "[null, \"x\", {}]"}, {"[]"}});
  Check({R"({"type": "array", "maxItems": 0})", {"[]", "[ ]"}, {"[1]"}});
  Check({R"({"type": "array", "items": {"type": "array", "items": {"type": "boolean"}}})",
         {"[[true], [], [false, true]]"},
         {"[[1]]", "[true]"}});
}

TEST(JsonSchema, StringLength) {
  Check({R"({"type": "string", "minLength": 2, "maxLength": 4})",
         {R"("ab")", R"("abcd")", R"("é😀")", R"("\n\t")"},
         {R"("a")", R"("abcde")", R"("")"}});
  Check({R"({"type": "string", "maxLength": 0})", {R"("")"}, {R"("a")"}});
  Check({R"({"type": "string", "minLength": 3})", {R"("abc")", R"("abcdefgh")"}, {R"("ab")"}});
}

TEST(JsonSchema, EnumConstAndTypeArrays) {
  Check({R"({"enum": ["red", "green", 3, null, {"a": [1]}]})",
         {R"("red")", R"("green")", "3", "null", R"({"a":[1]})"},
         {R"("blue")", "4", R"("Red")", R"({"a": [1]})"}});
  Check({R"({"type": "string", "enum": ["x", 1, "y"]})", {R"("x")", R"("y")"}, {"1"}});
  Check({R"({"const": "fixed \"q\" é"})", {R"("fixed \"q\" é")"}, {R"("fixed")"}});
  Check({R"({"type": ["string", "null"]})", {R"("s")", "null"}, {"1", "[]"}});
  Check({R"({"type": ["integer", "array"], "items": {"type": "null"}})",
         {"7", "[null]", "[]"},
         {"[1]", "7.5"}});
}

TEST(JsonSchema, AnyOfOneOfAllOf) {
  Check({R"({"anyOf": [{"type": "integer"}, {"type": "object",
      "properties": {"t": {"const": "x"}}, "required": ["t"]}]})",
         {"5", R"({"t": "x"})"},
         {R"({"t": "y"})", R"("5")"}});
  Check({R"({"oneOf": [{"type": "boolean"}, {"type": "null"}]})", {"true", "null"}, {"0"}});
  Check({R"({"allOf": [{"type": "integer"}]})", {"1"}, {"\"1\""}});
}

TEST(JsonSchema, RefsToDefsAndRecursion) {
  Check({R"({"$defs": {"Point": {"type": "object",
      "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"]}},
      "type": "array", "items": {"$ref": "#/$defs/Point"}})",
         {R"([{"x": 1, "y": 2}, {"x": -0.5, "y": 3e2}])", "[]"},
         {R"([{"x": 1}])", R"([{"y": 2, "x": 1}])"}});
  Check({R"({"definitions": {"s": {"type": "string"}}, "properties": {"a": {"$ref": "#/definitions/s"}}})",
         {R"({"a": "q"})"},
         {R"({"a": 1})"}});
  // A recursive tree, through "#/$defs/Node" and through "#".
  Check({R"({"$defs": {"Node": {"type": "object", "properties": {"v": {"type": "integer"},
      "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}, "required": ["v"]}},
      "$ref": "#/$defs/Node"})",
         {R"({"v": 1})", R"({"v": 1, "kids": [{"v": 2, "kids": [{"v": 3}]}, {"v": 4}]})"},
         {R"({"v": 1, "kids": [{"w": 2}]})"}});
  Check({R"({"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}})",
         {"{}", R"({"next": null})", R"({"next": {"next": {}}})"},
         {R"({"next": 1})"}});
}

TEST(JsonSchema, RealisticToolArguments) {
  Check({R"({"type": "object", "title": "get_weather", "description": "Weather in a city",
      "properties": {
        "location": {"type": "string", "description": "City and country"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
        "days": {"type": "integer", "format": "int32"},
        "include": {"type": "array", "items": {"enum": ["wind", "rain"]}, "maxItems": 2}
      },
      "required": ["location", "unit"], "additionalProperties": false})",
         {R"({"location": "Paris, France", "unit": "celsius"})",
          R"({"location": "Paris", "unit": "fahrenheit", "days": 3, "include": ["rain"]})"},
         {R"({"location": "Paris"})", R"({"location": "Paris", "unit": "kelvin"})",
          R"({"location": "Paris", "unit": "celsius", "include": ["wind", "rain", "wind"]})"}});
}

std::string SchemaError(const std::string& schema) {
  auto g = JsonSchemaToGbnf(schema);
  EXPECT_FALSE(g.ok()) << schema << " compiled to\n" << g.value();
  if (g.ok()) return "";
  EXPECT_EQ(g.status().code(), ErrorCode::kInvalidArgument);
  return g.status().message();
}

TEST(JsonSchema, RefusesWhatItDoesNotSupportNamingIt) {
  EXPECT_NE(SchemaError(R"({"type": "string", "pattern": "^a+$"})").find("keyword 'pattern'"),
            std::string::npos);
  EXPECT_NE(SchemaError(R"({"properties": {"age": {"type": "integer", "minimum": 0}}})")
                .find("'/properties/age': keyword 'minimum' is not supported"),
            std::string::npos);
  EXPECT_NE(SchemaError(R"({"type": "array", "prefixItems": [{}]})").find("'prefixItems'"),
            std::string::npos);
  EXPECT_NE(SchemaError(R"({"type": "array", "items": [{}]})").find("tuples"), std::string::npos);
  EXPECT_NE(SchemaError(R"({"$ref": "https://example.com/s.json"})").find("not supported"),
            std::string::npos);
  EXPECT_NE(SchemaError(R"({"$ref": "#/$defs/Missing"})").find("names nothing"), std::string::npos);
  EXPECT_NE(SchemaError(R"({"allOf": [{"type": "string"}, {"maxLength": 3}]})").find("'allOf'"),
            std::string::npos);
  EXPECT_NE(SchemaError(R"({"type": "string", "not": {}})").find("keyword 'not'"),
            std::string::npos);
  EXPECT_NE(SchemaError(R"({"type": "date"})").find("unknown type 'date'"), std::string::npos);
  EXPECT_NE(SchemaError(R"({"$ref": "#/$defs/A", "type": "object", "$defs": {"A": {}}})")
                .find("next to '$ref'"),
            std::string::npos);
  EXPECT_NE(SchemaError(R"({"properties": {"a": {}}, "required": ["b"]})")
                .find("required property 'b'"),
            std::string::npos);
  EXPECT_NE(SchemaError(R"({"properties": {"a\"b": {}}, "additionalProperties": true})")
                .find("needs escaping"),
            std::string::npos);
}

TEST(JsonSchema, RefusesUnsatisfiableAndMalformedSchemas) {
  EXPECT_NE(SchemaError("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(SchemaError("false").find("allows no value"), std::string::npos);
  EXPECT_NE(SchemaError("[1]").find("must be an object or a boolean"), std::string::npos);
  EXPECT_NE(SchemaError(R"({"enum": []})").find("allows no value"), std::string::npos);
  EXPECT_NE(SchemaError(R"({"type": "integer", "enum": ["a"]})").find("allows no value"),
            std::string::npos);
  EXPECT_NE(SchemaError(R"({"anyOf": []})").find("non-empty"), std::string::npos);
  EXPECT_NE(SchemaError(R"({"type": "array", "minItems": 3, "maxItems": 2})").find("maxItems"),
            std::string::npos);
  EXPECT_NE(SchemaError(R"({"type": "string", "minLength": 5, "maxLength": 2})").find("maxLength"),
            std::string::npos);
  EXPECT_NE(SchemaError(R"({"type": "string", "maxLength": 1000000})").find("limit"),
            std::string::npos);
  EXPECT_NE(SchemaError(R"({"type": "string", "maxLength": -1})").find("non-negative"),
            std::string::npos);
  EXPECT_NE(SchemaError(R"({"properties": {"a": false}, "required": ["a"]})")
                .find("schema false"),
            std::string::npos);
  // A $ref cycle that never reaches a value: refused by the grammar checks, not a hang.
  auto loop = CompileJsonSchema(R"({"$ref": "#/$defs/A", "$defs": {"A": {"$ref": "#/$defs/A"}}})");
  EXPECT_FALSE(loop.ok());
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += R"({"type": "array", "items": )";
  deep += "{}";
  for (int i = 0; i < 100; ++i) deep += "}";
  EXPECT_NE(SchemaError(deep).find("nested deeper"), std::string::npos);
}

}  // namespace
}  // namespace kvmem::engine::grammar

namespace kvmem::engine::grammar {
namespace {

// The one-spelling modes: each value has exactly one accepted spelling, Python's json.dumps
// (ensure_ascii=False) for kPython and its separators=(",", ":") form for kCompact (the spellings
// below are json.dumps' output, written by hand).
TEST(JsonSchema, OneSpellingModesAcceptOnlyJsonDumps) {
  const std::string schema = R"({"type": "object", "properties": {
      "a": {"type": "integer"}, "b": {"type": "array", "items": {"type": "string"}},
      "c": {}}, "required": ["a", "b"]})";
  const auto grammar = [&](JsonSpelling spelling) {
    auto gbnf = JsonSchemaToGbnf(schema, spelling);
    EXPECT_TRUE(gbnf.ok());
    auto g = Grammar::Parse(gbnf.value());
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    return std::make_shared<const Grammar>(std::move(g).value());
  };
  const auto python = grammar(JsonSpelling::kPython);
  const auto compact = grammar(JsonSpelling::kCompact);
  const auto free = grammar(JsonSpelling::kFree);

  const std::string dumps = R"({"a": 1, "b": ["x\ny", "\u001f\"\\", "é/"], "c": {"d": [true, null]}})";
  const std::string dumps_compact = R"({"a":1,"b":["x\ny","\u001f\"\\","é/"],"c":{"d":[true,null]}})";
  EXPECT_TRUE(Accepts(python, dumps));
  EXPECT_TRUE(Accepts(compact, dumps_compact));
  EXPECT_TRUE(Accepts(free, dumps));
  EXPECT_TRUE(Accepts(free, dumps_compact));
  EXPECT_FALSE(Accepts(python, dumps_compact));
  EXPECT_FALSE(Accepts(compact, dumps));

  // Other spellings of the same value: whitespace, escapes json.dumps does not write.
  for (const std::string& other :
       {std::string(R"({"a": 1, "b": [],  "c": 0})"), std::string(R"({ "a": 1, "b": []})"),
        std::string("{\"a\": 1,\n\"b\": []}"), std::string(R"({"a": 1, "b": ["\u00e9"]})"),
        std::string(R"({"a": 1, "b": ["\/"]})"), std::string(R"({"a": 1, "b": ["\u001F"]})"),
        std::string(R"({"a": 1, "b": ["\u000a"]})")}) {
    EXPECT_FALSE(Accepts(python, other)) << other;
  }
  EXPECT_TRUE(Accepts(free, R"({"a": 1, "b": ["\u00e9", "\/"]})"));
  EXPECT_TRUE(Accepts(free, "{ \"a\" : 1,\n  \"b\": [] }"));
}

}  // namespace
}  // namespace kvmem::engine::grammar
