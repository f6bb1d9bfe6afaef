"""LLaMA-Factory's preprocessing batches (preprocessing_batch_size, preprocessing_num_workers) and the three
things that follow them: SFT packing, pre-training packing and KTO's mismatched pairs."""

from __future__ import annotations

import pytest

from engine.data.chunks import preprocessing_chunks
from engine.data.templates import get_template


@pytest.mark.parametrize(("count", "batch_size", "workers"), [(10, 3, None), (25, 4, 3), (7, 1000, 16), (2, 1, 4),
                                                              (13, 5, 2)])
def test_chunks_are_the_batches_datasets_map_hands_the_preprocessing(tmp_path, count, batch_size, workers):
    """The same row ranges as datasets.map(batched=True, batch_size, num_proc), which LLaMA-Factory calls. It runs
    in a child process: datasets' worker pool leaves this one's terminal detection changed for later tests."""
    import json
    import subprocess
    import sys

    code = f"""
import json
from datasets import Dataset
def first_row(batch):  # each row learns the first row of the batch it was processed in
    return {{"batch": [batch["i"][0]] * len(batch["i"])}}
mapped = Dataset.from_dict({{"i": list(range({count}))}}).map(first_row, batched=True, batch_size={batch_size},
                                                           num_proc={workers})
print(json.dumps(list(mapped["batch"])))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "HF_DATASETS_CACHE": str(tmp_path)}).stdout
    batch_of = json.loads(out.strip().splitlines()[-1])
    expected = [[row for row in range(count) if batch_of[row] == start] for start in sorted(set(batch_of))]
    assert [list(chunk) for chunk in preprocessing_chunks(count, batch_size, workers)] == expected


def test_pre_training_packs_each_batch_and_drops_its_leftover(qwen_tokenizer):
    from engine.data.pretrain import chunked_text_rows, text_rows

    texts = ["one two three four five six seven", "eight nine", "ten eleven twelve thirteen", "fourteen"]
    options = {"packing": True, "eos": qwen_tokenizer.eos_token}
    first = sum(len(qwen_tokenizer(t + options["eos"], add_special_tokens=False)["input_ids"]) for t in texts[:2])
    assert first % 5  # the first batch leaves a leftover shorter than a block
    whole = text_rows(texts, qwen_tokenizer, 5, **options)
    batched = chunked_text_rows(texts, qwen_tokenizer, 5, **options, chunks=preprocessing_chunks(4, 2, None))
    per_batch = [len(text_rows(texts[i:i + 2], qwen_tokenizer, 5, **options)) for i in (0, 2)]
    assert len(batched) == sum(per_batch) and all(len(row) == 5 for row in batched)
    assert batched[:first // 5] == whole[:first // 5]
    assert batched != whole  # each batch's leftover is dropped, so blocks start afresh at the second batch


def test_kto_pairs_each_answer_with_the_previous_one_of_its_batch(qwen_tokenizer):
    from engine.data.feedback import encode_feedback

    template = get_template("qwen", qwen_tokenizer)
    examples = [{"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"answer {i}"}],
                 "kto_tag": i % 2 == 0, "source": f"r{i}"} for i in range(4)]

    def partners(chunks):
        samples = encode_feedback(examples, qwen_tokenizer, template, 64, chunks)
        return [qwen_tokenizer.decode([t for t in s["kl_labels"] if t >= 0], skip_special_tokens=True).split()[-1]
                for s in samples]

    assert partners(None) == ["3", "0", "1", "2"]  # one batch: shifted by one, the first takes the last
    assert partners(preprocessing_chunks(4, 2, None)) == ["1", "0", "3", "2"]  # within each batch of two
