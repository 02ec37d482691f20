"""The privacy ledger's storage: one schema and one SQL text, on SQLite or on PostgreSQL.

:class:`dpdist.privacy.accountant.Accountant` is the ledger's interface; this package holds what it
stores and where:

* :mod:`.backend`: where a ledger lives (a path or a URL, read once: a mistyped URL is refused), the
  scheme -> backend table and the Protocol every backend meets;
* :mod:`.connection`: what the statements run on (a connection in one transaction, ``?`` markers);
* :mod:`.schema`: the tables, their versions and the upgrades between them (both backends);
* :mod:`.queries`: the statements on budgets, releases and links (one SQL text for both backends);
* :mod:`.composed`: each budget's composed state (the privacy filter's running sums, exact), so a
  charge reads one row, not the history;
* :mod:`.records`: a release's record and a budget's status, as Python values, and their texts;
* :mod:`.outcomes`: a release's recorded outcome (its result, or its failure by class): recording
  every outcome keeps a retry from drawing noise twice;
* :mod:`.sqlite`: the SQLite file (the default; refused on a network filesystem, :mod:`.netfs`);
* :mod:`.postgres`: the PostgreSQL database a team shares (a ``postgresql://`` URL);
* :mod:`.migrate`: copying an SQLite ledger to PostgreSQL, verified release by release, and
  :mod:`.moves`: how both ledgers record a move, so exactly one takes charges at every point.
"""
