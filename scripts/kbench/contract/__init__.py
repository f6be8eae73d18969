"""contract (a shelf of the ground floor): the cell's contract, what every stage reads of a cell: spec (CellSpec, the
plan's typed record of a cell), cell (CellResult: the one reader and writer of cell JSONs), precision (the one table of
precisions).

May import: the ground floor only."""
