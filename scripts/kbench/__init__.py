"""kbench: the code behind the Keras 3 multi-backend benchmark pipeline.

Host side (driver venv): matrix, launch, tables. Cell side (stack env / image): runner, timing, adapters.
The cell side imports no framework until an adapter is built, so the host can import everything here.
"""
