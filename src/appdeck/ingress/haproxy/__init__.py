"""The HAProxy data plane (issue 21 §1): HAProxy in master-worker mode beside the control
plane, outliving it, driven through its runtime API (:mod:`.runtime_api`)."""
