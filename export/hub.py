"""A Hugging Face model id -> its directory in the hub's cache, with the files nmt-import reads.

Torch-free (huggingface_hub only, imported when a model is fetched), so that ``nmt-serve``'s
conversion step (export/model_cache.py) finds an already converted package without loading
torch. ``fetch`` reads the hub's environment when it is called (HF_HOME, HF_HUB_CACHE,
HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE), not when huggingface_hub was imported.
"""

from __future__ import annotations

import os
import re
from pathlib import Path


class ImportRefused(ValueError):
    """A directory this importer cannot turn into a package; the message names what and why."""


HUB_PREFIX = "hf:"
MODEL_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
TOKENIZER_FILES = ("config.json", "source.spm", "target.spm", "vocab.json", "sentencepiece.bpe.model",
                   "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")


def hub_id(source: str | Path) -> str | None:
    """The model id ``source`` names (``owner/name`` or ``hf:owner/name``) when it is not an
    existing path; None for a path."""
    text = str(source)
    if text.startswith(HUB_PREFIX):
        return text[len(HUB_PREFIX):]
    if Path(text).exists() or not MODEL_ID.fullmatch(text):
        return None
    return text


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE")


def _hub_cache() -> str | None:
    """The hub's cache, from the environment as it is now (huggingface_hub reads it once, when
    it is imported); None: huggingface_hub's own default."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return str(Path(os.environ["HF_HOME"]) / "hub")
    return None


def weight_files(names: list[str]) -> list[str]:
    """The weights to fetch among a repository's top-level files: safetensors (one file or
    shards with their index), else pytorch_model.bin (the same); never both."""
    top = [n for n in names if "/" not in n]
    for pattern in (r"model(-\d+-of-\d+)?\.safetensors|model\.safetensors\.index\.json",
                    r"pytorch_model(-\d+-of-\d+)?\.bin|pytorch_model\.bin\.index\.json"):
        chosen = [n for n in top if re.fullmatch(pattern, n)]
        if chosen:
            return chosen
    return []


def fetch(model_id: str, revision: str | None = None, log=print, command: str = "nmt-import") -> Path:
    """The directory of ``model_id`` at ``revision`` in the hub's cache, with the files this
    importer reads, downloaded if they are not there yet. ImportRefused, on one line, says why
    it cannot be fetched (offline, not found, gated, unreachable) and what to give ``command``
    instead. The directory's name is the snapshot's commit."""
    try:
        from huggingface_hub import HfApi, snapshot_download
        from huggingface_hub.errors import (
            GatedRepoError,
            HfHubHTTPError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError:
        raise ImportRefused(f"{command} needs huggingface_hub to fetch a model id: pip install '.[hf]'") from None
    at = f" at revision {revision}" if revision else ""
    instead = (f"download it where the hub can be reached (e.g. `hf download {model_id} --local-dir DIR`) and "
               f"give {command} that directory")

    def refused(why: str) -> ImportRefused:
        return ImportRefused(f"cannot fetch the model {model_id}{at}: {why}; {instead}")

    endpoint = os.environ.get("HF_ENDPOINT") or None  # read now: huggingface_hub read it at its import
    cache = _hub_cache()
    offline = _truthy("HF_HUB_OFFLINE")
    names: list[str] | None = None
    if not offline:
        try:
            info = HfApi(endpoint=endpoint).model_info(model_id, revision=revision)
            names = [s.rfilename for s in info.siblings or ()]
        except GatedRepoError:
            raise refused("the model is gated: accept its conditions on its page, then log in "
                          "(`hf auth login` or HF_TOKEN)") from None
        except RepositoryNotFoundError:
            raise refused("not found on the hub (no such model, or a private one: log in with `hf auth login` "
                          "or HF_TOKEN)") from None
        except RevisionNotFoundError:
            raise refused(f"the model has no revision {revision}") from None
        except HfHubHTTPError as e:
            status = e.response.status_code if e.response is not None else None
            if status == 404:
                raise refused("not found on the hub") from None
            log(f"the hub answered {status}; looking for {model_id} in the cache")
        except OSError as e:  # requests' ConnectionError and Timeout among them: the cache may still have it
            log(f"the hub cannot be reached ({type(e).__name__}); looking for {model_id} in the cache")
    if names is not None:
        weights = weight_files(names)
        if not weights:
            raise refused("it has no model.safetensors or pytorch_model.bin (weights Transformers reads)")
        patterns = [n for n in names if n in TOKENIZER_FILES] + weights
        log(f"fetching {model_id}{at}: {', '.join(patterns)}")
    else:
        patterns = [*TOKENIZER_FILES, "*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin",
                    "pytorch_model.bin.index.json"]
    try:
        path = snapshot_download(model_id, revision=revision, cache_dir=cache, endpoint=endpoint,
                                 allow_patterns=patterns, local_files_only=names is None)
    except LocalEntryNotFoundError:
        why = ("offline (HF_HUB_OFFLINE is set)" if offline else "the hub cannot be reached")
        raise refused(f"{why} and it is not in the hub's cache") from None
    except (HfHubHTTPError, OSError) as e:
        raise refused(f"the download failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    return Path(path)


