"""The processor saved with a vision-language checkpoint (``--model DIR``), loaded for pictures.

transformers' ``AutoProcessor`` builds every part a processor has: Qwen2-VL's and
Qwen2.5-VL's include a video processor, which needs torchvision, which this project does
not install (no build of it runs beside the CPU build of torch it pins). MIRAGE feeds
pictures and text only, so where the whole processor cannot load, the processor class
its configs name is built from the parts that feed those (the image processor and the
tokenizer) with the others left out: the model family's own code still expands each
picture into its image tokens. Anything else that does not load is refused in one line.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import transformers
from transformers import AutoProcessor
from transformers.processing_utils import ProcessorMixin
from transformers.utils import is_torchvision_available
from transformers.utils import logging as hf_logging

from mirage.core.errors import ConfigError

CONFIGS = ("processor_config.json", "preprocessor_config.json")  # where a checkpoint names its processor
PICTURE_PARTS = ("image_processor", "tokenizer")  # what a processor needs to encode text and pictures


def saved(path: str | None) -> bool:
    """Whether the checkpoint at ``path`` has a saved processor."""
    return path is not None and any((Path(path).expanduser() / name).is_file() for name in CONFIGS)


def load(path: str, tokenizer):
    """The processor saved at ``path`` with ``tokenizer`` as its tokenizer (the one the
    backend encodes and decodes with); ConfigError, one line, when it cannot load."""
    try:
        with _errors_only():
            processor = AutoProcessor.from_pretrained(path)
    except Exception as error:  # a part it cannot build (torchvision), or a broken config
        processor = _pictures_only(path, tokenizer, _one_line(error))
    if not isinstance(processor, ProcessorMixin) or getattr(processor, "image_processor", None) is None:
        raise ConfigError(f"--model {path!r}: its saved processor ({type(processor).__name__}) does not "
                          "process images; an image-text-to-text checkpoint's processor does")
    processor.tokenizer = tokenizer
    return processor


def problem(path: str) -> str | None:
    """Why the local vision-language checkpoint at ``path`` has no processor the backend
    can use, or None (also for a text checkpoint or a hub id: loading says what they are).
    Without a saved processor only the tiny policy's kind (LLaVA) is served: its processor
    is rebuilt from its config (vision.py)."""
    from mirage.plugins.backend_local.model import load_tokenizer

    config = Path(path).expanduser() / "config.json"
    if not config.is_file():
        return None
    try:
        model = json.loads(config.read_text())
    except ValueError:
        return None  # not a checkpoint's config: loading the model says so
    if "vision_config" not in model:
        return None
    if not saved(path):
        if model.get("model_type") == "llava":
            return None
        return (f"--model {path!r}: no saved processor beside its config.json (one of {', '.join(CONFIGS)}): "
                "an image-text-to-text checkpoint is read with the processor it was saved with")
    try:
        load(path, load_tokenizer(path))
    except ConfigError as error:
        return str(error)
    except Exception as error:  # the tokenizer
        return f"--model {path!r}: its tokenizer cannot load ({_one_line(error)})"
    return None


def _pictures_only(path: str, tokenizer, why: str):
    """The processor class named in ``path``'s configs, built from its image processor and
    ``tokenizer`` only (``why``: what loading the whole of it said)."""
    name = _named(path, "processor_class")
    cls = getattr(transformers, name, None) if name else None
    if not (isinstance(cls, type) and issubclass(cls, ProcessorMixin)) or "image_processor" not in cls.get_attributes():
        raise ConfigError(f"--model {path!r}: its processor cannot load ({why})")
    try:
        image_processor = _image_processor(path)
        parts = {"image_processor": image_processor, "tokenizer": tokenizer}
        picture_only = type(name, (cls,), {"check_argument_for_proper_class": _left_out_or_checked})
        return picture_only(**{part: parts.get(part) for part in cls.get_attributes()},
                            chat_template=getattr(tokenizer, "chat_template", None))
    except Exception as error:
        raise ConfigError(f"--model {path!r}: its processor cannot load ({_one_line(error)})") from None


def _left_out_or_checked(self, argument_name, argument):
    """ProcessorMixin's check of each part, for a processor built for pictures: the parts
    that feed neither text nor pictures may be None (left out)."""
    if argument is None and argument_name not in PICTURE_PARTS:
        return None
    return ProcessorMixin.check_argument_for_proper_class(self, argument_name, argument)


def _image_processor(path: str):
    """The image processor saved at ``path``, of the class its config names (transformers
    gives the PIL backend of an image processor whose default backend needs torchvision,
    where AutoImageProcessor itself needs torchvision)."""
    name = _named(path, "image_processor_type")
    # without torchvision, its PIL backend by name (transformers would warn that it falls back)
    pil = None if is_torchvision_available() or not name else getattr(transformers, f"{name}Pil", None)
    cls = pil or (getattr(transformers, name, None) if name else None)
    if cls is None:
        raise ValueError(f"no image processor class named in {CONFIGS[1]} (image_processor_type: {name!r})")
    return cls.from_pretrained(path)


def _named(path: str, key: str) -> str | None:
    """The class a checkpoint's processor configs name under ``key``, or None."""
    for name in CONFIGS:
        config = Path(path).expanduser() / name
        if config.is_file():
            try:
                found = json.loads(config.read_text()).get(key)
            except (ValueError, AttributeError):
                continue
            if found:
                return found
    return None


@contextmanager
def _errors_only():
    """transformers' log at errors only: its warning that an image processor falls back to
    its PIL backend (no torchvision) is what this module does on purpose."""
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def _one_line(error: Exception) -> str:
    reason = " ".join(str(error).split()) or type(error).__name__
    return reason if len(reason) <= 240 else reason[:237] + "..."
