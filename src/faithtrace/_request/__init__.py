"""The request path: the decorator, capturing the texts of a call, the per-function state and the hand-over of
a returned call, and the wrappers of streamed answers."""
