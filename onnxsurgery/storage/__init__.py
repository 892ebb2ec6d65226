"""Storage: models in and out of files. What the other packages use from here is listed below
(tests/test_rooms.py checks that they import nothing else, and no private name); the modules:

- io: load_model / open_model (payloads left in their files), import_onnx
- lazy: ExternalFiles (open data files, the spill file), payloads read back into protos
- file_backed: file-backed gs values (lazy's gs side: no onnx-graphsurgeon where no graph is made)
- skim: the wire-level reader (a model without its large payloads), kept per command (`remembering`)
- wire: the protobuf wire format, just enough to find tensors without parsing payloads
- writer: a model written with payloads copied from the input files (layout_model, DataFileLayout)
- staging: stage_model / save_model: staged beside the output, checked, put in place
- held_lists: long list attributes exported as placeholders, written from the input's protos
- protos: every graph and tensor of a ModelProto
- paths: the one rule for files a model names
- npy: .npy files and their manifest

The names load on first use (PEP 562), as the top package's do: `import onnxsurgery.storage`
loads none of numpy, onnx or gs. Inside onnxsurgery, modules import from the module itself
(`from ..storage.lazy import ExternalFiles`): the import-cycle test then sees each edge.
"""

from __future__ import annotations

from ..lazy_exports import lazy_exports

# name -> the module of this package that defines it
_HOMES = {
    **dict.fromkeys(["RawAttribute", "import_onnx", "inputs_with_defaults", "load_model", "needs_external_data",
                     "open_model"], "io"),
    **dict.fromkeys(["ExternalFiles", "materialize", "read_model_skipping_weights"], "lazy"),
    **dict.fromkeys(["FileBackedValues", "held_payload"], "file_backed"),
    **dict.fromkeys(["BIT_PATTERN_DTYPES", "DEFAULT_MIN_BYTES", "NpyModel", "default_npy_dir", "load_feeds",
                     "manifest_path", "read_manifest", "with_npy_arrays", "write_arrays", "write_manifest"], "npy"),
    **dict.fromkeys(["check_external_locations", "confined", "external_locations", "location_entries"], "paths"),
    **dict.fromkeys(["list_attribute_bytes", "read_structure", "remembering"], "skim"),
    **dict.fromkeys(["all_tensor_protos", "graphs_everywhere"], "protos"),
    **dict.fromkeys(["held"], "held_lists"),
    **dict.fromkeys(["check_output_folder", "check_output_path", "copy_file", "copy_with_data", "data_files_of",
                     "save_model", "stage_model",
                     "write_atomic"], "staging"),
}
_MODULES = ("io", "lazy", "file_backed", "skim", "wire", "writer", "staging", "held_lists", "protos", "paths", "npy")

__all__ = sorted(_HOMES) + list(_MODULES)


__getattr__, __dir__ = lazy_exports(__name__, _HOMES, _MODULES)
