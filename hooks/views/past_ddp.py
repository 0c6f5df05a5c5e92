"""Views of chapter 8's labs: one part of what each printed per marker, for example
`<!-- lab:compile-ddp:compile-graphs -->` (code/past_ddp/compile_ddp.py) or
`<!-- lab:zero:zero-state -->` (code/past_ddp/zero_lab.py).
"""

from views.common import part_views

VIEWS = {
    **part_views("compile", ["graphs", "orders", "inductor"]),
    **part_views("zero", ["model", "state", "equal", "collectives", "fsdp"]),
}
