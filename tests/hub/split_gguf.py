"""A GGUF file split into real GGUF parts (`NAME-00001-of-00003.gguf`), as llama.cpp's gguf-split
writes them: the first part holds the metadata, each part some tensors and the `split.*` keys, so
llama.cpp loads the model from its first part."""

from __future__ import annotations

import math
from pathlib import Path


def split_gguf(source: Path, out_dir: Path, name: str, parts: int = 3) -> list[Path]:
    import gguf

    reader = gguf.GGUFReader(source)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    per_part = math.ceil(len(reader.tensors) / parts)
    writer = gguf.GGUFWriter(out_dir / f"{name}.gguf", arch, split_max_tensors=per_part)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        kind = field.types[0]
        sub_type = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub_type)
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, tensor.data, raw_shape=tensor.data.shape, raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return sorted(out_dir.glob(f"{name}-*-of-*.gguf"))
