// Chat prompts without a Jinja engine: recognises which common chat format a model's
// chat_template implements (by its special-token markers) and renders messages in it.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "troupe/tools.hpp"

namespace troupe::runtime {

// The formats we can render. Every rendered prompt ends where the assistant's reply
// begins (Hugging Face's add_generation_prompt = true).
//
// Below, S = system content, U1/U2 = user, A1 = assistant, for the conversation
// system S, user U1, assistant A1, user U2:
//
// plain   - our own fallback for a model with no chat_template, or one we do not
//           recognise. One line per message, "Role: content", roles written System /
//           User / Assistant, then "Assistant:" with no trailing space (the model's
//           first token then carries its own leading space, as in ordinary text).
//           Content is written as given. BOS is not included.
//             "System: S\nUser: U1\nAssistant: A1\nUser: U2\nAssistant:"
//           A model continuing this text will often go on to write "\nUser:" itself,
//           so callers will want that as a stop string.
//
// llama2  - Llama-2-chat. Each user turn is "<s>[INST] ... [/INST]", each assistant
//           turn " ... </s>"; the system message is folded into the first user turn
//           inside <<SYS>> markers. As Llama-2's template does, each whole turn's text
//           (system block included) is trimmed of surrounding whitespace.
//             "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nU1 [/INST] A1 </s><s>[INST] U2 [/INST]"
//
// llama3  - Llama-3 instruct. Every message, whatever its role, is a header plus its
//           trimmed content plus <|eot_id|>; <|begin_of_text|> once at the start.
//             "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
//             "<|start_header_id|>user<|end_header_id|>\n\nU1<|eot_id|>" ...
//             "<|start_header_id|>assistant<|end_header_id|>\n\n"
//           Llama-3.1+ templates also write a date/tools preamble into the system
//           turn; that is not reproduced.
//
// chatml  - Qwen and many others. Content is written as given, without BOS.
//             "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n" ...
//             "<|im_start|>assistant\n"
//           Qwen3's <think> handling of earlier assistant turns is not reproduced; its
//           enable_thinking switch is (chat_options, has_thinking_switch): false ends the
//           prompt as Qwen/Qwen3-8B's template does,
//             "<|im_start|>assistant\n<think>\n\n</think>\n\n"
//           and true, the template's default, writes nothing more.
//
// mistral - Mistral/Mixtral instruct. No system role of its own: the system content
//           goes before the first user message, separated by "\n\n". BOS once at the
//           start, </s> after each assistant turn. Mistral's published templates differ
//           in whitespace from version to version; we use Llama-2's spacing without its
//           per-turn BOS, and do not trim.
//             "<s>[INST] S\n\nU1 [/INST] A1</s>[INST] U2 [/INST]"
//
// phi3    - Phi-3 / Phi-3.5 instruct (microsoft/Phi-3-mini-4k-instruct's template). Every
//           message is its role's marker, a newline, its content as given and <|end|>, then
//           a newline; no BOS, and an assistant turn left open at the end. The template
//           has no tool role: tool results are a user turn (the hermes syntax's).
//             "<|system|>\nS<|end|>\n<|user|>\nU1<|end|>\n<|assistant|>\nA1<|end|>\n" ...
//             "<|assistant|>\n"
//
// gemma   - Gemma 2 / Gemma 3 instruct (google/gemma-3-4b-it's template; Gemma 2's is the same
//           but raises an error on a system message, where we do as Gemma 3). <bos> once, then
//           each message "<start_of_turn>" + role + "\n" + its trimmed content + "<end_of_turn>\n",
//           the assistant's role written "model". No system turn: the system content, as
//           given, and "\n\n" go before the first user message's content. No tool role: tool
//           results are a user turn (the hermes syntax's). The generation prompt opens a model turn.
//             "<bos><start_of_turn>user\nS\n\nU1<end_of_turn>\n<start_of_turn>model\nA1<end_of_turn>\n"
//             "<start_of_turn>user\nU2<end_of_turn>\n<start_of_turn>model\n"
//           Generation ends at <end_of_turn>, which Gemma's generation_config.json lists as
//           an eos_token_id.
//
// The BOS/EOS strings written for llama2 and mistral are "<s>" and "</s>", those of the
// Llama-2 and Mistral tokenizers, and gemma's BOS is "<bos>"; a fine-tune that renamed them
// would need its own.
enum class chat_format { plain, llama2, llama3, chatml, mistral, phi3, gemma };

std::string_view to_string(chat_format f);

// role: "system", "user", "assistant" or "tool" (lower case, as in OpenAI-style requests).
// An assistant message may carry the calls it made; a tool message answers one of them.
struct chat_message {
  std::string role;
  std::string content;
  std::vector<tool_call> tool_calls;
  std::string tool_call_id;
};

// Looks for each family's special-token markers in the template text (not at the model
// name, so fine-tunes that keep a family's format are recognised too):
//   llama3:  <|start_header_id|> together with <|end_header_id|> or <|eot_id|>
//   chatml:  <|im_start|>
//   llama2:  [INST] together with <<SYS>>
//   mistral: [INST] without <<SYS>>
//   phi3:    <|user|> together with <|end|> and <|assistant|>
//   gemma:   <start_of_turn> together with <end_of_turn>
// Checked in that order. "" (no template) and anything else give plain. A template that
// only assembles its markers at run time (e.g. '<|' + role + '|>') is not recognised.
chat_format detect_chat_format(std::string_view template_text);

// The system message a ChatML template writes when the conversation has none (Qwen2's
// "You are a helpful assistant."), or "" when there is none we can take out simply.
// We look for one complete system turn written as a single string literal:
// '<|im_start|>system\n' + text + '<|im_end|>' inside one pair of quotes, where the
// text has no quotes, braces, backslashes or '+', i.e. no Jinja expression. Such a
// literal is assumed to be the "when none is given" default, which is how Qwen2 and
// Qwen2.5 use it. Anything more involved gives "" (no default).
std::string default_system_message(std::string_view template_text);

// Whether a template takes Qwen3's enable_thinking switch: a chatml template whose text
// names enable_thinking (Qwen3's does; Qwen2.5's does not).
bool has_thinking_switch(std::string_view template_text);

// What a request may ask of the template beyond its messages: vLLM's chat_template_kwargs,
// the ones we reproduce without Jinja.
struct chat_options {
  // false: chatml ends the prompt with an empty think block (Qwen3's switch); the other
  // formats ignore it. Pass false only for a template that has_thinking_switch: a request's
  // enable_thinking false changes nothing for any other template, as Jinja ignores a
  // variable the template does not use.
  bool enable_thinking = true;
};

// Renders the conversation ending with the assistant's generation prompt
// (add_generation_prompt = true). If default_system is not empty and the first message
// is not a system message, {system, default_system} is put in front first (pass
// default_system_message(template) here to match Qwen2's template).
//
// tools: the functions offered to the model, written in the format's tool syntax; tool
// calls and tool messages are written in it too (runtime/tools/tool_prompt.hpp says how).
//
// Throws invalid_argument_error for: no messages; a role other than system / user /
// assistant / tool; and, for llama2, mistral and gemma, whose templates require it, a
// conversation that is not [system] user assistant user ... user (a system message only
// first, then user and assistant alternating, starting with user). llama2 and mistral must
// also end with user: they have no way to prompt the model for a reply after an assistant
// turn; gemma may end with the assistant (its template then opens another model turn).
// For llama2 and gemma tool results count as a user turn; mistral also takes tool results
// after an assistant's calls, and may end with them. The other formats take messages in
// any order.
std::string render_chat(chat_format f, std::span<const chat_message> messages, std::string_view default_system = {},
                        std::span<const tool_function> tools = {}, chat_options options = {});

// Whether render_chat's text already begins with the BOS string (llama2, llama3,
// mistral, gemma), so the caller must not add BOS again when tokenizing:
//   tok.encode(text, /*add_special_tokens=*/!rendered_includes_bos(f))
// The special-token strings in the text are matched as the tokenizer's added tokens.
bool rendered_includes_bos(chat_format f);

} // namespace troupe::runtime
