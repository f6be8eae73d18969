"""What a claim reads on one run: the run's context (kbench.results.context.RunContext: the profile's, or the suite's
for a claim of the suite's tables) and the tables' files by the names the table registry lists
(kbench.results.registry), each read once. Which of those files this run makes says which claims stand on its page.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from kbench.results import first_step_tables, registry
from kbench.results.context import RunContext

# How a file is read where its CSV's guess would lose what it says: pays_back_after_steps is text ("at once", "12",
# "never: ..."), not a number.
READ = {first_step_tables.LONG: {"dtype": {"pays_back_after_steps": object}}}


@dataclass
class Evidence:
    run: RunContext
    made: frozenset[str] = frozenset()          # the files this run's tables make (for run.profile: None the suite's)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)   # those read so far (a test hands its own in)

    def table(self, name: str) -> pd.DataFrame:
        """A table's file under the run's tables folder, read once."""
        if name not in registry.OUTPUTS:
            raise ValueError(f"{name}: no table of kbench.results.registry writes it; a claim reads a table's file")
        if name not in self.tables:
            self.tables[name] = pd.read_csv(self.run.tables_dir / name, **READ.get(name, {}))
        return self.tables[name]

    def makes(self, names: tuple[str, ...]) -> bool:
        """Whether this run's tables make every one of these files (a claim that reads them stands on its page)."""
        return set(names) <= self.made

    @classmethod
    def given(cls, run: RunContext, tables: dict[str, pd.DataFrame]) -> Evidence:
        """Evidence of tables already in hand (a test's): the run makes them, and only them."""
        return cls(run, frozenset(tables), dict(tables))
