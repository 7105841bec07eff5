"""YOURS TO CHANGE: the BERT-family classifier and its tokenizer, loaded and exported.

``--model-name-or-path`` is a Hub id, a ``save_pretrained`` folder (local, ``/gcs/``, ``gs://``)
or ``scratch``: a small BERT built here, so smoke runs and tests need no Hub download.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections import Counter
from collections.abc import Iterable

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer
from transformers.utils import logging as hf_logging
from vertex_trainer_runtime import checkpoints, cli, runtime

logger = logging.getLogger(__name__)

SCRATCH = "scratch"
SCRATCH_MODEL = "scratch-model"  # the folder of --model-name-or-path=scratch in the work dir


SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _wordpiece_vocab(texts: Iterable[str], normalizer, pre_tokenizer, size: int) -> dict:
    """Special tokens, every character (alone and as ``##`` suffix), then the commonest words.

    Built by sorting, not with ``tokenizers``' trainer, whose vocabulary changes from run to
    run: replicas and restarted runs must all get the same token ids.
    """
    counts = Counter()
    for text in texts:
        if text:
            pieces = pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))
            counts.update(word for word, _ in pieces)
    chars = sorted({char for word in counts for char in word})
    tokens = SPECIAL_TOKENS + chars + ["##" + char for char in chars]
    by_count = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    tokens += [word for word, _ in by_count if len(word) > 1][: max(0, size - len(tokens))]
    return {token: index for index, token in enumerate(tokens)}


def _save_wordpiece_tokenizer(
    texts: Iterable[str], folder: str, vocab_size: int, max_length: int
) -> dict[str, int]:
    """BERT's normalizer and pre-tokenizer over a WordPiece vocabulary made from ``texts``,
    saved as a ``BertTokenizerFast`` in ``folder``; returns the vocabulary."""
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece
    from transformers import BertTokenizerFast

    normalizer = normalizers.BertNormalizer(lowercase=True)
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    vocab = _wordpiece_vocab(texts, normalizer, pre_tokenizer, vocab_size)
    wordpiece = Tokenizer(WordPiece(vocab, unk_token="[UNK]"))
    wordpiece.normalizer = normalizer
    wordpiece.pre_tokenizer = pre_tokenizer
    wordpiece.post_processor = processors.BertProcessing(
        ("[SEP]", vocab["[SEP]"]), ("[CLS]", vocab["[CLS]"])
    )
    wordpiece.decoder = decoders.WordPiece()
    tokenizer_file = os.path.join(folder, "wordpiece.json")
    wordpiece.save(tokenizer_file)
    tokenizer = BertTokenizerFast(tokenizer_file=tokenizer_file, model_max_length=max_length)
    tokenizer.save_pretrained(folder)
    os.remove(tokenizer_file)
    return vocab


def build_scratch(
    texts: Iterable[str],
    folder: str,
    hidden_size: int = 128,
    layers: int = 2,
    vocab_size: int = 4000,
    max_length: int = 512,
    seed: int = 42,
) -> str:
    """Write a randomly initialised BERT and a WordPiece vocabulary made from ``texts``, loaded back
    with ``from_pretrained`` like any model. The same texts and seed give the same model on every
    node and restart; weights go through ``safetensors`` directly (``save_pretrained`` writes
    nothing on a rank other than 0)."""
    from safetensors.torch import save_file
    from transformers import BertConfig, BertModel

    os.makedirs(folder, exist_ok=True)
    vocab = _save_wordpiece_tokenizer(texts, folder, vocab_size, max_length)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=max(2, hidden_size // 64),
        intermediate_size=4 * hidden_size,
        max_position_embeddings=max_length,
    )
    config.architectures = [BertModel.__name__]
    with torch.random.fork_rng(devices=[]):  # leave the caller's RNG alone
        torch.manual_seed(seed)
        weights = BertModel(config).state_dict()
    config.save_pretrained(folder)
    tensors = {name: tensor.contiguous() for name, tensor in weights.items()}
    save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    return folder


def make_model(flags, raw, work_dir: str, first: bool):
    """``SPEC.make_model``: (model, tokenizer) of ``--model-name-or-path``; for ``scratch`` (one
    process, or the user's own torchrun) the node's ``first`` process builds it in ``work_dir``."""
    model_path = flags.model.model_name_or_path
    if model_path == SCRATCH:
        model_path = os.path.join(work_dir, SCRATCH_MODEL)
        if first:
            _build_scratch(flags, raw, model_path)
    tokenizer = load_tokenizer(model_path)  # first: a wrong path says "tokenizer", as before
    return load_model(model_path, raw.label_names), tokenizer


def worker_flags(flags, raw, work_dir: str) -> list[str]:
    """``SPEC.worker_flags``: for ``scratch``, the model every node builds once, in its work dir,
    before its torchrun workers start (the same model on every node)."""
    if flags.model.model_name_or_path != SCRATCH:
        return []
    path = _build_scratch(flags, raw, os.path.join(work_dir, SCRATCH_MODEL))
    return [f"--model-name-or-path={path}"]


def _build_scratch(flags, raw, folder: str) -> str:
    texts = raw.train[raw.text_column]
    max_length = max(512, flags.data.max_seq_length)
    return build_scratch(texts, folder, max_length=max_length, seed=flags.shared.seed)


def resolve(name_or_path: str) -> str:
    """A folder path for ``gs://`` and ``/gcs/`` values; Hub ids are returned unchanged."""
    if runtime.is_gcs_uri(name_or_path) or name_or_path.startswith(runtime.FUSE_ROOT):
        try:
            path = runtime.local_path(name_or_path)
        except RuntimeError as error:
            raise cli.InputError(str(error)) from None
        if not os.path.isdir(path):
            raise cli.InputError(f"--model-name-or-path {name_or_path}: no such folder")
        return path
    return name_or_path


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def load_tokenizer(name_or_path: str):
    try:
        return AutoTokenizer.from_pretrained(resolve(name_or_path))
    except (OSError, ValueError) as error:
        raise cli.InputError(
            f"--model-name-or-path {name_or_path}: cannot load a tokenizer ({_first_line(error)})"
        ) from None


def load_model(name_or_path: str, label_names: list[str]):
    """A sequence classifier with one output per class, named after the data's labels.

    transformers' multi-line report of new and unused weights (colour codes, a Cloud Logging
    entry per line) is silenced and summed up in one line."""
    report_logger = hf_logging.get_logger("transformers.modeling_utils")
    report_logger.addFilter(_drop_load_report)
    try:
        model, info = AutoModelForSequenceClassification.from_pretrained(
            resolve(name_or_path),
            num_labels=len(label_names),
            id2label=dict(enumerate(label_names)),
            label2id={name: index for index, name in enumerate(label_names)},
            # A checkpoint fine-tuned for another number of classes gets a fresh head.
            ignore_mismatched_sizes=True,
            output_loading_info=True,
        )
    except (OSError, ValueError) as error:
        raise cli.InputError(
            f"--model-name-or-path {name_or_path}: cannot load the model ({_first_line(error)})"
        ) from None
    finally:
        report_logger.removeFilter(_drop_load_report)
    _log_loading(name_or_path, info)
    return model


def _drop_load_report(record: logging.LogRecord) -> bool:
    """False for the report of new and unused weights: the 5.x table, the 4.x paragraphs.

    Other warnings of loading still show. (Raising the logger's level instead would also
    switch on transformers 5's warnings about tensor-parallel plans.)
    """
    if record.funcName == "log_state_dict_report":
        return False
    return not str(record.msg).startswith("Some weights of")


def _modules(keys) -> str:
    """``classifier.weight``, ``classifier.bias`` -> ``classifier``: one name per module."""
    return ", ".join(sorted({key.rsplit(".", 1)[0] for key in keys}))


def _log_loading(name_or_path: str, info: dict) -> None:
    new = set(info.get("missing_keys", ())) | {key[0] for key in info.get("mismatched_keys", ())}
    unused = set(info.get("unexpected_keys", ()))
    if new:
        logger.info("Loaded %s; new, randomly initialised: %s", name_or_path, _modules(new))
    else:
        logger.info("Loaded %s; every weight came from it", name_or_path)
    if unused:
        logger.info("Not used from %s: %s", name_or_path, _modules(unused))


def export(flags, model, tokenizer, model_dir: str, staging: str) -> None:
    """``SPEC.export``: ``save_pretrained`` in ``staging``, then copy file by file into the local
    path ``model_dir`` (rank 0 only).

    ``--max-seq-length``, the truncation used in training and evaluation, is kept as the
    tokenizer's ``model_max_length`` so that predictions truncate the way the reported metric did.
    """
    shutil.rmtree(staging, ignore_errors=True)
    tokenizer.model_max_length = flags.data.max_seq_length
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    checkpoints.copy_files(staging, model_dir)
    logger.info("Model exported to %s", runtime.to_gcs_uri(model_dir))
