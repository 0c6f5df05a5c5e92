"""Views of chapter 8's labs: one part of what each printed per marker, for example
`<!-- lab:compile-ddp:compile-graphs -->` (code/past_ddp/compile_ddp.py) or
`<!-- lab:zero:zero-state -->` (code/past_ddp/zero_lab.py).
"""

from lab_views import part_views

part_views("compile", ["graphs", "orders", "inductor"])
part_views("zero", ["model", "state", "equal", "collectives", "fsdp"])
