"""An analysis on a device: the roofline and what fits (``roofline``), time per component
(``timing``, and its array form ``timing_grid`` for sweeps), memory for training and inference
(``memory``), serving's TTFT/TPOT (``serving``), and ``on_device.analyze``, the analysis with its
roofline and predicted time. Each builds on ``costmodel.analysis`` and ``costmodel.devices``."""
