// The `alpaca` source: instruction data in the Alpaca format, a JSON array of
// {"instruction", "input", "output"} objects ("input" may be empty or absent; JSON Lines, one
// object per line, is read too). Each example becomes
//   [BOS] prompt-ids  response-ids EOS  padding
// with the loss on the response and EOS only: a target counts where the token it predicts is a
// response token. Sequences longer than seq_len + 1 are truncated; shorter ones are padded with
// the tokenizer's pad id (else EOS, else 0) and targets kIgnoreIndex. An example whose prompt
// leaves no room for a response token is dropped, with a warning.
#include "data/data_source.hpp"
#include "data/documents.hpp"
#include "data/sequences.hpp"

#include "model/model.hpp"
#include "runtime/error.hpp"
#include "runtime/input.hpp"
#include "runtime/log.hpp"
#include "tokenizer/tokenizer.hpp"

#include <nlohmann/json.hpp>

#include <sstream>

namespace zf {
namespace {

using nlohmann::json;

struct Record {
  json value;
  std::string label;  // "element 3" or "line 4", for messages
};

// A JSON array, or JSON Lines when the text does not start with '['.
// `where`: "FILE:LINE:COL: data.KEY", the key that names the file.
std::vector<Record> parse_records(const std::string &text, const std::string &where, const std::string &path) {
  std::vector<Record> records;
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') {
    json root = parse_json(text, where + ": " + path);
    for (size_t i = 0; i < root.size(); ++i) records.push_back({std::move(root[i]), format("element %zu", i)});
    return records;
  }
  std::istringstream lines(text);
  std::string line;
  for (size_t number = 1; std::getline(lines, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    records.push_back({parse_json(line, format("%s: %s line %zu (Alpaca data is a JSON array of objects, or "
                                               "one object per line)", where.c_str(), path.c_str(), number)),
                       format("line %zu", number)});
  }
  return records;
}

std::string field(const Record &record, const char *name, bool required, const std::string &path) {
  const char *shape = "each example is {\"instruction\": ..., \"input\": ..., \"output\": ...}";
  ZF_REQUIRE(record.value.is_object(), "%s: %s is %s, not an object; %s", path.c_str(), record.label.c_str(),
             record.value.type_name(), shape);
  auto it = record.value.find(name);
  if (it == record.value.end() || it->is_null()) {
    ZF_REQUIRE(!required, "%s: %s has no \"%s\"; %s", path.c_str(), record.label.c_str(), name, shape);
    return "";
  }
  ZF_REQUIRE(it->is_string(), "%s: %s: \"%s\" is %s, not a string", path.c_str(), record.label.c_str(), name,
             it->type_name());
  return it->get<std::string>();
}

}  // namespace

// The Stanford Alpaca templates. The response starts on the line after "### Response:", as in
// the Alpaca README (and alpaca-lora); Alpaca's train.py puts it right after the colon.
std::string alpaca_prompt(const std::string &instruction, const std::string &input) {
  if (input.empty())
    return "Below is an instruction that describes a task. Write a response that appropriately completes the "
           "request.\n\n### Instruction:\n" + instruction + "\n\n### Response:\n";
  return "Below is an instruction that describes a task, paired with an input that provides further context. Write a "
         "response that appropriately completes the request.\n\n### Instruction:\n" + instruction +
         "\n\n### Input:\n" + input + "\n\n### Response:\n";
}

std::string alpaca_chat_template() {
  const std::string prompt = alpaca_prompt("INSTRUCTION", "");
  const size_t at = prompt.find("INSTRUCTION");
  return "{#- zfcore: this model was fine-tuned on the Alpaca prompt (data.type = \"alpaca\"), not on its tokenizer's "
         "chat template; this template renders that prompt. -#}\n"
         "{%- for message in messages -%}\n"
         "{%- if message['role'] == 'user' -%}\n"
         "{{- (bos_token or '') + " + nlohmann::json(prompt.substr(0, at)).dump() + " + message['content'] + " +
         nlohmann::json(prompt.substr(at + 11)).dump() + " -}}\n"
         "{%- elif message['role'] == 'assistant' -%}\n"
         "{{- message['content'] + (eos_token or '') -}}\n"
         "{%- endif -%}\n"
         "{%- endfor -%}\n";
}

std::shared_ptr<const SequenceSet> load_alpaca_sequences(const RunConfig &config, const char *key) {
  std::string path = data_path(config, "an Alpaca JSON file", true, key);
  std::string where = config.where("data", key).str() + ": data." + key;
  std::vector<Record> records = parse_records(read_data_file(config, path, key), where, path);
  ZF_REQUIRE(!records.empty(), "%s: %s holds no examples", where.c_str(), path.c_str());

  std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(config);
  check_tokenizer_vocab(config, *tokenizer);
  std::optional<int64_t> eos = tokenizer->eos_id();
  ZF_REQUIRE(eos, "%s: data.type = \"alpaca\" ends each response with EOS, and tokenizer %s has none",
             config.where("data", "tokenizer").str().c_str(), tokenizer->name().c_str());
  int64_t seq_len = config.integer("data", "seq_len");
  int64_t pad = tokenizer->pad_id().value_or(*eos);
  log_info("data: the model learns the Alpaca prompt, not its tokenizer's chat template; an export carries a "
           "chat_template.jinja of the Alpaca prompt");
  Documents documents;
  int64_t dropped = 0, truncated = 0;
  for (const Record &record : records) {
    std::string instruction = field(record, "instruction", true, path);
    std::string input = field(record, "input", false, path);
    std::string output = field(record, "output", true, path);
    std::vector<int64_t> prompt;
    if (auto bos = tokenizer->bos_id()) prompt.push_back(*bos);
    std::vector<int64_t> text = tokenizer->encode(alpaca_prompt(instruction, input));
    prompt.insert(prompt.end(), text.begin(), text.end());
    std::vector<int64_t> response = tokenizer->encode(output);
    response.push_back(*eos);
    // The first response token is a target at position prompt.size() - 1 < seq_len.
    if (int64_t(prompt.size()) > seq_len) {
      ++dropped;
      continue;
    }
    if (int64_t(prompt.size() + response.size()) > seq_len + 1) ++truncated;
    std::vector<uint8_t> counted(prompt.size(), 0);
    counted.resize(prompt.size() + response.size(), 1);
    prompt.insert(prompt.end(), response.begin(), response.end());
    documents.add(prompt, counted);
  }
  if (dropped > 0)
    log_warn(format("%s: %lld of %zu examples have prompts of more than data.seq_len = %lld tokens and are left out",
                    path.c_str(), (long long)dropped, records.size(), (long long)seq_len));
  if (truncated > 0)
    log_info(format("%s: %lld examples are cut to data.seq_len = %lld tokens", path.c_str(), (long long)truncated,
                    (long long)seq_len));
  ZF_REQUIRE(documents.count() > 0, "%s: data.seq_len = %lld leaves no room for any response of %s; raise it",
             config.where("data", "seq_len").str().c_str(), (long long)seq_len, path.c_str());
  return make_document_sequences(std::move(documents), seq_len, tokenizer->vocab_size(), pad,
                                 "alpaca " + path + " (" + tokenizer->name() + ")");
}

std::string exported_chat_template(const RunConfig &config) {
  const std::string type = config.string("data", "type"), path = config.string("data", "chat_template");
  if (type == "alpaca") {
    if (!config.string("checkpoint", "export_hf").empty())
      log_info("export: the model trained on the Alpaca prompt (data.type = \"alpaca\"), not on its tokenizer's chat "
               "template: the export's chat_template.jinja renders the Alpaca prompt instead");
    return alpaca_chat_template();
  }
  if (type != "chat" || path.empty()) return "";
  std::string text;
  std::string why = read_regular_file(path, 16 << 20, &text);
  ZF_REQUIRE(why.empty(), "%s: data.chat_template: cannot read %s: %s", config.where("data", "chat_template").str().c_str(),
             path.c_str(), why.c_str());
  return text;
}

}  // namespace zf
