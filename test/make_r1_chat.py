#!/usr/bin/env python3
"""The DeepSeek-R1 distills' chat references, made without run.c.

1. vocab: derives the DeepSeek-R1-Distill-Qwen vocabulary from
   models/vocab/qwen2-vocab.gguf (Qwen2's byte-level BPE, which the distills
   keep) by giving ids 151643..151649 DeepSeek's added tokens, with the token
   types llama.cpp's convert_hf_to_gguf.py gives them (CONTROL for the
   special ones and those spelled <|...|> or <｜...｜>, USER_DEFINED for
   <think> and </think>), ids 151665..151668, which the distills' tokenizer
   does not have, padding as the converter pads ([PADn], UNUSED), BOS
   <｜begin▁of▁sentence｜> added to prompts, EOS <｜end▁of▁sentence｜>, and
   DeepSeek's chat template (reference/arch/chat/deepseek_r1.jinja). The
   file is 6 MB, so it is not kept: the suite derives the same file itself.
2. render: renders conversations with that template through jinja2, as
   transformers renders a chat template, and tokenizes the text with
   llama.cpp's llama-tokenize (control tokens parsed, no BOS added: the
   template writes it), writing reference/arch/chat/deepseek_r1_chat.tsv
   (system, user, ids per turn) and deepseek_r1_history.tsv (system, user,
   reply, ids of the whole conversation through that reply); then the same
   with the distills' template of January 2025
   (reference/arch/chat/deepseek_r1_early.jinja, whose generation prompt is
   <｜Assistant｜> alone, so the replies carry the model's own <think>),
   writing deepseek_r1_early_chat.tsv and deepseek_r1_early_history.tsv.

   PYTHONPATH=llama.cpp/gguf-py python3 test/make_r1_chat.py vocab OUT.gguf
   python3 test/make_r1_chat.py render OUT.gguf path/to/llama-tokenize
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CHAT = os.path.join(HERE, "data", "reference", "arch", "chat")
BOS_TEXT = "<｜begin▁of▁sentence｜>"
EOS_TEXT = "<｜end▁of▁sentence｜>"
CONTROL, USER_DEFINED, UNUSED = 3, 4, 5
DEEPSEEK_TOKENS = {  # id: (text, type), as tokenizer_config.json has them
    151643: (EOS_TEXT, CONTROL),
    151644: ("<｜User｜>", CONTROL),
    151645: ("<｜Assistant｜>", CONTROL),
    151646: (BOS_TEXT, CONTROL),
    151647: ("<|EOT|>", CONTROL),
    151648: ("<think>", USER_DEFINED),
    151649: ("</think>", USER_DEFINED),
}
FIRST_PAD = 151665  # the distills' tokenizer ends at 151664


def template_text(name="deepseek_r1"):
    with open(os.path.join(CHAT, name + ".jinja"), encoding="utf-8") as f:
        return f.read()


def derive_vocab(out_path):
    import gguf
    src = gguf.GGUFReader(os.path.join(HERE, "data", "models", "vocab", "qwen2-vocab.gguf"))
    writer = gguf.GGUFWriter(out_path, "qwen2")
    for key, field in src.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = field.contents()
        if key == "tokenizer.ggml.tokens":
            for i in range(FIRST_PAD, len(value)):
                value[i] = f"[PAD{i}]"
            for i, (text, _) in DEEPSEEK_TOKENS.items():
                value[i] = text
        elif key == "tokenizer.ggml.token_type":
            for i in range(FIRST_PAD, len(value)):
                value[i] = UNUSED
            for i, (_, kind) in DEEPSEEK_TOKENS.items():
                value[i] = kind
        elif key == "tokenizer.chat_template":
            value = template_text()
        elif key == "tokenizer.ggml.eos_token_id":
            value = 151643
        elif key == "tokenizer.ggml.add_bos_token":
            value = True
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(key, value, field.types[0], sub_type=field.types[-1])
        else:
            writer.add_key_value(key, value, field.types[0])
    writer.add_bos_token_id(151646)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


# Conversations: (system or None, [user, reply, user, reply, ...]); a reply
# is what the model wrote after the generation prompt <｜Assistant｜><think>\n.
CONVERSATIONS = [
    ("You are a helpful assistant.", ["What is a KV cache?",
        "The user asks about transformers.\n</think>\n\nA cache of keys and values.",
        "And why does it grow with the sequence length?", "It keeps one entry per position."]),
    (None, ["Hello!", "A greeting.\n</think>\n\nHello! How can I help?", "Tell me a joke about cats.",
            "Joke time.\n</think>\n\nWhy did the cat sit on the computer? To keep an eye on the mouse.",
            "Another one.", "Thinking cut short without an end"]),
    ("Answer in one word.", ["Capital of France?", "Easy.\n</think>\n\nParis", "  and of Italy?  ",
                             "First </think> then again </think>\n\nRome"]),
    ("You are terse.\nNever apologise.", ["Résumé of 東京 in 3 words", "東京 is big.\n</think>\n\n巨大な 都市 です。",
                                          "Why?", "</think>Because."]),
    (None, ["Tabs\tand  spaces \t", "Fine.\n</think>\n\n", "What do <think> tags mean? 😀",
            "Tags.\n</think>\n\n<think> opens reasoning."]),
]

# The January 2025 template's prompt ends at <｜Assistant｜>: the model writes
# <think>\n itself, so the same replies start with it; and replies that skip
# or empty the reasoning.
EARLY_CONVERSATIONS = [(system, [line if k % 2 == 0 else "<think>\n" + line for k, line in enumerate(lines)])
                       for system, lines in CONVERSATIONS] + [
    ("Reply in French.", ["Good morning", "Bonjour !", "And good night?",
                          "<think>\n\n</think>\n\nBonne nuit !", "Thanks", "<think>\nPolite.\n</think>\n\n De rien."]),
]


def render(template, messages, generation_prompt):
    import jinja2
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)  # as transformers compiles templates
    return env.from_string(template).render(messages=messages, bos_token=BOS_TEXT,
                                            add_generation_prompt=generation_prompt)


def tokenize(tool, vocab, text):
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", delete=False) as f:
        f.write(text)
    out = subprocess.run([tool, "-m", vocab, "-f", f.name, "--ids", "--no-bos", "--no-escape", "--log-disable"],
                         check=True, capture_output=True, text=True).stdout
    os.unlink(f.name)
    return json.loads(out.strip().splitlines()[-1])


def escape(text):
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


def make_references(vocab, tool, name, conversations):
    template = template_text(name)
    turns, history, shown = [], [], []
    for system, lines in conversations:
        messages = [{"role": "system", "content": system}] if system is not None else []
        for k in range(0, len(lines), 2):
            user, reply = lines[k], lines[k + 1]
            before = render(template, messages, False)
            messages.append({"role": "user", "content": user})
            text = render(template, messages, True)
            assert text.startswith(before)
            added = text if k == 0 else text[len(before):]  # what follows the last reply's end-of-turn
            first = "-" if system is None else escape(system)
            turns.append(f"{first if k == 0 else ''}\t{escape(user)}\t{' '.join(map(str, tokenize(tool, vocab, added)))}")
            messages.append({"role": "assistant", "content": reply})
            whole = render(template, messages, False)
            history.append(f"{first if k == 0 else ''}\t{escape(user)}\t{escape(reply)}\t"
                           f"{' '.join(map(str, tokenize(tool, vocab, whole)))}")
            shown.append([system, user, added, reply, whole])
    for tsv, rows in ((name + "_chat.tsv", turns), (name + "_history.tsv", history)):
        with open(os.path.join(CHAT, tsv), "w", encoding="utf-8") as f:
            f.write("\n".join(rows) + "\n")
    return shown


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "vocab":
        derive_vocab(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "render":
        shown = make_references(sys.argv[2], sys.argv[3], "deepseek_r1", CONVERSATIONS)
        shown += make_references(sys.argv[2], sys.argv[3], "deepseek_r1_early", EARLY_CONVERSATIONS)
        json.dump(shown, sys.stdout, ensure_ascii=False, indent=0)
    else:
        sys.exit(__doc__)
