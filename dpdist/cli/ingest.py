"""``dpdist ingest``: an svmlight/LIBSVM file or a table into a store.

Private analyses need a store whose columns are declared, not read from the data: the width and
index base of an svmlight file, the public values of a table's text columns.
"""

from __future__ import annotations

import argparse
import os

from dpdist.cli._common import EXIT_OK, _common_args, _emit_store, _progress_bar
from dpdist.exceptions import ParameterError


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``ingest`` command's arguments."""
    p = sub.add_parser("ingest", help="svmlight/LIBSVM file (plain, .bz2, .xz, .gz) or a table -> zarr store")
    p.add_argument("src", help="an svmlight file (plain, .bz2, .xz, .gz) or a table (CSV, xlsx, zipped CSV, R .RData)")
    p.add_argument("--out", required=True, help="store directory to create")
    p.add_argument("--force", action="store_true", help="replace an existing store")
    p.add_argument(
        "--zero-based",
        choices=("no", "yes", "auto"),
        default="no",
        help="svmlight: whether column indices start at 0 (default no: one-based, the LIBSVM "
        "convention); auto guesses from whether an index 0 appears, which private analyses refuse",
    )
    p.add_argument(
        "--n-features",
        type=int,
        default=None,
        help="svmlight: the number of columns, public (private analyses need it: without it the "
        "largest index seen is used)",
    )
    p.add_argument(
        "--task",
        choices=("auto", "binary", "multiclass", "regression"),
        default="auto",
        help="auto: binary when there are exactly two distinct labels (a text target: by its "
        "number of categories), else regression",
    )
    p.add_argument(
        "--target", default=None, help="tables (.csv, .data, .xlsx, .zip, .RData, .rda): target column (default: last)"
    )
    _add_table_args(p)
    p.add_argument("--name", default=None, help="the store's public name (default: random)")
    p.add_argument(
        "--labels",
        default=None,
        type=lambda s: [v for v in s.split(",") if v],
        help="the classes, comma-separated (public: with --task binary/multiclass; private analyses "
        "need them, or --task regression, so that no record's label can recode the others)",
    )
    _common_args(p)
    p.set_defaults(out_kind="store", func=_ingest)


def _add_table_args(p: argparse.ArgumentParser) -> None:
    """The options of tables: declared categories and fill value, or data-dependent ones (non-private)."""
    p.add_argument(
        "--categories",
        action="append",
        default=None,
        metavar="COLUMN=a,b,c",
        help="tables: a text column's public values (one 0/1 column each, and COLUMN=other for any "
        "other value); repeat for several columns",
    )
    p.add_argument(
        "--fill-value",
        type=float,
        default=None,
        help="tables: a public constant for missing values (each record's gaps alone: private)",
    )
    p.add_argument(
        "--non-private",
        action="store_true",
        help="allow a store whose columns are inferred from the data (--impute mean, "
        "--encode-categories, no --n-features): for non-private experiments only",
    )
    p.add_argument(
        "--impute",
        choices=("mean",),
        default=None,
        help="tables: fill missing features with column means (data-dependent: needs --non-private)",
    )
    p.add_argument(
        "--encode-categories",
        action="store_true",
        help="tables: code text columns 1..K from the values seen (data-dependent: needs --non-private)",
    )


def _ingest(args: argparse.Namespace) -> int:
    """``dpdist ingest SRC --out STORE``: write the store and print its public name and schema."""
    from dpdist.data.ingest import ingest_svmlight
    from dpdist.data.tables import ingest_table, is_table

    categories: dict[str, list[str]] = {}
    for spec in args.categories or []:
        col, sep, values = spec.partition("=")
        if not sep or not col or not values:
            raise ParameterError(f"--categories {spec!r}: write COLUMN=value1,value2,... (the column's public values)")
        categories[col] = [v for v in values.split(",") if v]
    if is_table(args.src):  # read whole (the bar's clock runs), then written block by block (rows done / rows)
        with _progress_bar(args, f"ingest {os.path.basename(args.src)}", None, count=True, private=False) as update:
            meta = ingest_table(
                args.src,
                args.out,
                force=args.force,
                target=args.target,
                impute=args.impute,
                encode=args.encode_categories,
                task=args.task,
                name=args.name,
                labels=args.labels,
                categories=categories or None,
                fill_value=args.fill_value,
                private=not args.non_private,
                progress=update,
            )
    else:
        if categories or args.fill_value is not None:
            raise ParameterError(
                "--categories and --fill-value are options of tables (CSV, xlsx, ...), not of "
                f"svmlight files ({args.src})"
            )
        if not args.non_private and (args.n_features is None or args.zero_based == "auto"):
            raise ParameterError(
                f"{args.src}: without a declared width (--n-features D, the dataset's documented "
                "number of features) and index base (--zero-based no|yes), the columns would be "
                "read from the data -- one record could shift the others' -- and private analyses "
                "would refuse the store: declare them, or pass --non-private for a store meant for "
                "non-private experiments only"
            )
        size = os.path.getsize(args.src) if os.path.isfile(args.src) else None
        compressed = str(args.src).endswith((".bz2", ".xz", ".gz"))
        what = f"ingest {os.path.basename(args.src)}"
        with _progress_bar(args, what, None if compressed else size, private=False) as update:
            meta = ingest_svmlight(
                args.src,
                args.out,
                force=args.force,
                zero_based=args.zero_based,
                n_features=args.n_features,
                task=args.task,
                name=args.name,
                labels=None if args.labels is None else [float(v) for v in args.labels],
                progress=lambda rows, text_bytes: update(text_bytes),
            )
    _emit_store(args, meta, {"label_mapping": meta["label_mapping"]}, "")
    return EXIT_OK
