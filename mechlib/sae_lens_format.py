"""An SAE in SAELens's on-disk layout (SAELens 6.x, ``SAE.save_model`` / ``SAE.load_from_disk``), so that an SAE moves
between mechlib and SAELens, and from there to the tools that read it (Neuronpedia's among them).

A folder holds two files:

- ``cfg.json``: ``architecture`` ("standard" for a ReLU SAE, "topk" with ``k``), ``d_in``, ``d_sae``, ``dtype``,
  ``device``, ``apply_b_dec_to_input`` (true: the encoder reads x − b_dec, as mechlib's does),
  ``normalize_activations`` and ``reshape_activations`` ("none"), and ``metadata`` with the TransformerLens hook it
  reads (``hook_name``), the model's name and the SAELens version whose layout this is (SAELens reads a file without
  one as the older 5.x layout);
- ``sae_weights.safetensors``: W_enc [d_in, d_sae], b_enc [d_sae], W_dec [d_sae, d_in], b_dec [d_in].

SAELens's "standard" and "topk" SAEs compute what ``mechlib.sae.SAE`` computes with the same weights (a TopK SAE with
``rescale_acts_by_decoder_norm`` false). Loading reads safetensors only, never a pickle, with plain bounded reads
(``safetensors_read``), and checks the config, then the weights' names, shapes and dtypes, their bytes against the
file, then finiteness, before any SAE is built; a folder that fails raises ``CheckpointError`` (a ``ValueError``)
with a sentence that says why.
"""

import json
from pathlib import Path

import torch
from safetensors.torch import save as st_save

from mechlib.io import MAX_BYTES, CheckpointError, write_atomic
from mechlib.sae import SAE, SAEConfig
from mechlib.safetensors_read import File, HeaderError

__all__ = ["CFG_FILE", "WEIGHTS_FILE", "SAELENS_VERSION", "ARCHITECTURES", "DTYPES", "MAX_CFG_BYTES", "lens_config",
           "save", "read_config", "load"]

CFG_FILE, WEIGHTS_FILE = "cfg.json", "sae_weights.safetensors"   # SAELens's SAE_CFG_FILENAME, SAE_WEIGHTS_FILENAME
SAELENS_VERSION = "6.54.12"            # the SAELens release whose layout this writes (tests/unit load it there)
ARCHITECTURES = {"relu": "standard", "topk": "topk"}   # mechlib's activation -> SAELens's architecture
DTYPES = {"float32": torch.float32, "float64": torch.float64}
MAX_CFG_BYTES = 64 * 1024              # a cfg.json is well under 1 kB; SAELens's training configs add a few kB


def lens_config(sae: SAE) -> dict:
    """The ``cfg.json`` SAELens 6.x writes for the same SAE."""
    cfg, dtype = sae.cfg, str(sae.W_enc.dtype).removeprefix("torch.")
    fields = {"architecture": ARCHITECTURES[cfg.activation], "d_in": cfg.d_in, "d_sae": cfg.d_sae, "dtype": dtype,
              "device": "cpu", "apply_b_dec_to_input": True, "normalize_activations": "none",
              "reshape_activations": "none",
              "metadata": {"sae_lens_version": SAELENS_VERSION, "sae_lens_training_version": SAELENS_VERSION,
                           "hook_name": cfg.hook_name, "model_name": cfg.model_name}}
    if cfg.activation == "topk":
        fields |= {"k": cfg.k, "rescale_acts_by_decoder_norm": False}
    return fields


def save(sae: SAE, folder: str | Path) -> None:
    """Write ``sae`` into ``folder`` (made if missing) as SAELens lays it out; each file written atomically."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {name: getattr(sae, name).detach().contiguous().cpu() for name in ("W_enc", "b_enc", "W_dec", "b_dec")}
    write_atomic(folder / WEIGHTS_FILE, st_save(tensors))
    write_atomic(folder / CFG_FILE, json.dumps(lens_config(sae), indent=2).encode())


def _field(fields: dict, name: str, kind: type, allowed: tuple = ()) -> object:
    value = fields.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)) or (allowed and value not in allowed):
        want = " or ".join(map(repr, allowed)) if allowed else kind.__name__
        raise CheckpointError(f"{CFG_FILE}'s {name} is {str(value)[:40]!r}; this needs {want}")
    return value


def read_config(folder: str | Path) -> tuple[SAEConfig, str]:
    """(mechlib's config, the dtype's name) of the SAE in ``folder``, from its ``cfg.json`` alone, checked: an
    architecture and settings mechlib's SAE computes exactly, and a size under the checkpoint cap."""
    path = Path(folder) / CFG_FILE
    if not path.is_file():
        raise CheckpointError(f"no {CFG_FILE} in {folder}: an SAELens SAE is a folder with {CFG_FILE} and "
                              f"{WEIGHTS_FILE}")
    if path.stat().st_size > MAX_CFG_BYTES:
        raise CheckpointError(f"{CFG_FILE} is {path.stat().st_size:,} bytes, more than a config's {MAX_CFG_BYTES:,}")
    try:
        fields = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise CheckpointError(f"{CFG_FILE} is not JSON") from None
    if not isinstance(fields, dict):
        raise CheckpointError(f"{CFG_FILE} is not a JSON object")
    architecture = _field(fields, "architecture", str, tuple(ARCHITECTURES.values()))
    d_in, d_sae = _field(fields, "d_in", int), _field(fields, "d_sae", int)
    dtype = _field(fields, "dtype", str, tuple(DTYPES))
    if fields.get("apply_b_dec_to_input") is not True:
        raise CheckpointError(f"{CFG_FILE}'s apply_b_dec_to_input is not true; mechlib's encoder reads x − b_dec")
    if fields.get("normalize_activations") != "none" or fields.get("reshape_activations", "none") != "none":
        raise CheckpointError(f"{CFG_FILE} normalizes or reshapes the activations; mechlib's SAE reads them as they "
                              "are (normalize_activations and reshape_activations 'none')")
    metadata = fields.get("metadata") if isinstance(fields.get("metadata"), dict) else {}
    names = {name: metadata.get(name) or "" for name in ("hook_name", "model_name")}  # SAELens writes None for none
    activation = {value: key for key, value in ARCHITECTURES.items()}[architecture]
    k = 1
    if activation == "topk":
        k = _field(fields, "k", int)
        if fields.get("rescale_acts_by_decoder_norm", False):
            raise CheckpointError(f"{CFG_FILE} has rescale_acts_by_decoder_norm true; mechlib's TopK picks latents "
                                  "by their pre-activations alone (fold the decoder norms into the encoder first)")
    if (2 * d_in * d_sae + d_in + d_sae) * DTYPES[dtype].itemsize > MAX_BYTES:
        raise CheckpointError(f"an SAE of d_in = {d_in} and d_sae = {d_sae} in {dtype} is not one this reads: its "
                              f"weights must fit in {MAX_BYTES // 10**6} MB")
    try:
        cfg = SAEConfig(d_in=d_in, d_sae=d_sae, activation=activation, k=k, **names)
    except ValueError as error:
        raise CheckpointError(f"{CFG_FILE} describes no SAE mechlib can build: {error}") from None
    return cfg, dtype


def load(folder: str | Path) -> SAE:
    """The SAE saved in ``folder`` (by ``save`` or by SAELens's ``save_model``), on the CPU in its dtype, after every
    check above. Raises ``CheckpointError``."""
    cfg, dtype = read_config(folder)
    path = Path(folder) / WEIGHTS_FILE
    if not path.is_file():
        raise CheckpointError(f"no {WEIGHTS_FILE} in {folder}")
    if path.stat().st_size > MAX_BYTES:
        raise CheckpointError(f"{WEIGHTS_FILE} is {path.stat().st_size / 10**6:,.1f} MB; at most "
                              f"{MAX_BYTES // 10**6} MB is read")
    with torch.device("meta"):
        expected = SAE(cfg).state_dict()
    try:
        with File(path) as file:
            _check_entries(file, expected, dtype)
            file.check_spans()
            tensors = {name: file.tensor(name) for name in expected}
            file.unchanged()
    except HeaderError as error:
        raise CheckpointError(f"{WEIGHTS_FILE} cannot be read as safetensors: {error}") from None
    for name, tensor in tensors.items():
        if not torch.isfinite(tensor).all():
            raise CheckpointError(f"{name} holds NaN or infinite values; the SAE is corrupt")
    sae = SAE(cfg).to(DTYPES[dtype])
    sae.load_state_dict(tensors)
    return sae.requires_grad_(False).eval()


def _check_entries(file: File, expected: dict[str, torch.Tensor], dtype: str) -> None:
    """The header's names, shapes and dtypes against the config's, before any tensor is read."""
    missing, unexpected = sorted(set(expected) - set(file.entries)), sorted(set(file.entries) - set(expected))
    if missing or unexpected:
        raise CheckpointError(f"{WEIGHTS_FILE} holds {', '.join(sorted(name[:40] for name in file.entries)[:6])}; an "
                              f"SAE has exactly W_enc, b_enc, W_dec and b_dec")
    for name, want in expected.items():
        entry = file.entries[name]
        if entry.shape != list(want.shape):
            raise CheckpointError(f"{name} has shape {str(entry.shape)[:40]}, but {CFG_FILE} needs {list(want.shape)}")
        if entry.torch_dtype != DTYPES[dtype]:
            raise CheckpointError(f"{name} is {entry.dtype}, but {CFG_FILE} says {dtype}")
