"""Devices: hardware profiles (``hardware``: what a device computes, moves and holds), the
efficiency tables a profile carries (``efficiency``), and the one finder and loader of profiles
(``profiles``). Nothing here knows an analysis: ``costmodel.runtime`` puts analyses on devices."""
