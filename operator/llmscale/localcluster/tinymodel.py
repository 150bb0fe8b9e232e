"""Build the tiny random-weight Llama that the local cluster's real vLLM engines serve.

No model hub is reachable from the test machines, so the model is made here, deterministically:
a 2-layer Llama (hidden 128, 4 heads, 0.8 M parameters, safetensors) with random weights from a
fixed seed, and a byte-level BPE tokenizer trained with ``tokenizers`` on generated text, with a
chat template. It generates nonsense at ~2 ms a token on one CPU core, which is all a scaling
test needs: real batching, a real KV cache, real preemptions and real ``/metrics``.

Run with the vLLM environment's Python (``build-vllm.sh`` does), which has ``transformers``,
``tokenizers`` and ``torch``; llmscale itself never imports it::

    python tinymodel.py DIR

Writes into ``DIR.tmp`` and renames it to ``DIR``; the stamp ``DIR/.complete`` comes last.
"""

from __future__ import annotations

import random
import shutil
import sys
from pathlib import Path

SEED = 20261201
VOCAB_SIZE = 2048  # ids the load generator sends must stay below this (see loadgen)
MAX_POSITIONS = 4096  # tokens: room for the e2e scenarios' 1,000-token prompts plus output

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}</s>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL = ["<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]


def corpus(rng: random.Random, n_lines: int = 4000) -> list[str]:
    """Generated English-like lines (syllable words, digits, punctuation) to train the BPE on."""
    onsets = ["", "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w",
              "st", "tr", "pl", "ch", "sh", "th", "qu"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ea", "ou", "y"]
    codas = ["", "", "n", "r", "s", "t", "l", "nd", "st", "ng", "ck"]
    words = ["".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas)
                     for _ in range(rng.randint(1, 3))) for _ in range(3000)]
    lines = []
    for _ in range(n_lines):
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(4, 18)))
        if rng.random() < 0.3:
            sentence += f" {rng.randint(0, 99999)}"
        lines.append(sentence.capitalize() + rng.choice([".", "?", "!", ",", ";"]))
    return lines


def build(out: Path) -> None:
    """Write the model, its config and its tokenizer into ``out`` (created anew)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    rng = random.Random(SEED)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=SPECIAL, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus(rng), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
        pad_token="</s>", model_max_length=MAX_POSITIONS,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(tmp)

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=MAX_POSITIONS,
        bos_token_id=tok.token_to_id("<s>"), eos_token_id=tok.token_to_id("</s>"),
        pad_token_id=tok.token_to_id("</s>"), tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(tmp, safe_serialization=True)

    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    (out / ".complete").write_text(f"seed {SEED}\n")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: tinymodel.py DIR", file=sys.stderr)
        return 2
    build(Path(argv[0]).resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
