"""Code objects the eval-frame hook holds state for, so ``reset()`` can clear it.

:data:`seen_code_objects` holds each code object that has cache entries or a skip mark
(``_C.skip_code``). The frame converter (convert_frame.py) and torch.compile interop
(torch_compile_interop.py) add to it; ``eval_frame.reset`` clears the marks. A leaf module,
so that neither needs to import the other.
"""

from __future__ import annotations

import types
import weakref

# Code objects that have cache entries or skip marks, so reset() can clear them.
seen_code_objects: weakref.WeakSet[types.CodeType] = weakref.WeakSet()
