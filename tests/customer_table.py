"""A synthetic customer table as a new user brings one (issue 56): raw-unit numbers with gaps, text columns,
a yes/no label and an id, with the Table Schema that declares it. Seeded; written by the tests, never shipped.

``python tests/customer_table.py OUT_DIR`` writes customers.csv (20,000 labelled rows), new.csv (10
unlabelled rows), public.csv (4,000 labelled rows) and schema.json there.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

# (name, type, minimum, maximum, fill, weight of the scaled value in the log-odds)
NUMBERS = (
    ("age", "integer", 18, 90, 45, -2.0),
    ("income", "number", 0, 200_000, 40_000, -2.5),
    ("tenure_months", "integer", 0, 120, 24, -3.0),
    ("monthly_spend", "number", 0, 500, 60, 2.5),
    ("support_calls", "integer", 0, 30, 1, 6.0),
    ("days_since_login", "integer", 0, 365, 30, 3.0),
)
TEXTS = {
    "plan": {"basic": 0.8, "plus": 0.0, "premium": -0.8},
    "region": {"north": 0.2, "south": 0.0, "east": -0.1, "west": 0.1},
    "channel": {"web": 0.3, "store": -0.3, "phone": 0.0},
}


def schema() -> dict:
    """The Table Schema that declares the table: ranges, fills, text values, the label's classes."""
    fields: list[dict] = [{"name": "customer_id", "type": "string"}]
    for name, kind, lo, hi, fill, _ in NUMBERS:
        fields.append({"name": name, "type": kind, "constraints": {"minimum": lo, "maximum": hi}, "fill": fill})
    for name, values in TEXTS.items():
        fields.append({"name": name, "type": "string", "constraints": {"enum": list(values)}})
    fields.append({"name": "churn", "type": "string", "constraints": {"enum": ["no", "yes"], "required": True}})
    return {"fields": fields, "missingValues": ["", "NA"], "primaryKey": "customer_id"}


def rows(n: int, seed: int, labelled: bool = True, first_id: int = 0) -> list[str]:
    """``n`` CSV lines (a header first): raw units, about 5% gaps per number, a few values outside the
    declared ranges and text values outside the declared ones (clipped and 'other' when read)."""
    rng = np.random.default_rng(seed)
    raw = {
        "age": np.clip(rng.normal(44, 14, n), 16, 95).round(),
        "income": np.clip(rng.lognormal(10.6, 0.5, n), 0, 260_000).round(2),
        "tenure_months": np.clip(rng.exponential(30, n), 0, 150).round(),
        "monthly_spend": np.clip(rng.gamma(3, 30, n), 0, 600).round(2),
        "support_calls": np.clip(rng.poisson(2, n), 0, 40),
        "days_since_login": np.clip(rng.exponential(45, n), 0, 400).round(),
    }
    texts = {
        name: rng.choice([*values, "unknown"], size=n, p=[0.97 / len(values)] * len(values) + [0.03])
        for name, values in TEXTS.items()
    }
    logit = np.full(n, -0.2)
    for name, _, lo, hi, _, weight in NUMBERS:
        logit += weight * np.clip((raw[name] - lo) / (hi - lo), 0, 1)
    for name, values in TEXTS.items():
        logit += np.array([values.get(v, 0.0) for v in texts[name]])
    churn = np.where(rng.random(n) < 1 / (1 + np.exp(-logit)), "yes", "no")
    header = ["customer_id", *(v[0] for v in NUMBERS), *TEXTS, *(["churn"] if labelled else [])]
    out = [",".join(header)]
    for i in range(n):
        cells = [f"c{first_id + i:06d}"]
        for name, kind, *_ in NUMBERS:
            v = raw[name][i]
            cells.append("" if rng.random() < 0.05 else (f"{int(v)}" if kind == "integer" else f"{v:.2f}"))
        cells += [texts[name][i] for name in TEXTS]
        if labelled:
            cells.append(str(churn[i]))
        out.append(",".join(cells))
    return out


def write(out: Path) -> dict[str, Path]:
    """The table (20,000 rows), 10 new unlabelled rows, 4,000 public labelled rows and the schema, in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {k: out / f"{k}.csv" for k in ("customers", "new", "public")}
    paths["customers"].write_text("\n".join(rows(20_000, seed=1)) + "\n")
    paths["new"].write_text("\n".join(rows(10, seed=2, labelled=False, first_id=900_000)) + "\n")
    paths["public"].write_text("\n".join(rows(4_000, seed=3, first_id=500_000)) + "\n")
    paths["schema"] = out / "schema.json"
    paths["schema"].write_text(json.dumps(schema(), indent=2) + "\n")
    return paths


if __name__ == "__main__":
    print(write(Path(sys.argv[1])))
