"""The public facts of a federation, written by ``fedmc federate split`` as ``manifest.json``.

Every party reads the manifest: the server to size its model and to know how many clients there
are, each client to place its users and items. It holds no rating: sizes, the item vocabulary,
the normalization (fitted on the training ratings, as ``fedmc run`` does) and the row range of
every client's users in the federation's row order.

The row ranges exist only so that a federation reproduces ``fedmc run``'s initial random values
(:attr:`fedmc.core.protocol.FederationInfo.client_rows`): a simulation draws every user's
``U^0`` row from one stream and hands each client its slice
(:meth:`fedmc.core.protocol.InitialDraws.take`), so a client needs its slice's place to compute
the same numbers. A production deployment, which need not match a simulation, would draw them
locally instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedmc.core.protocol import FederationInfo
from fedmc.core.scale import Normalizer
from fedmc.errors import ConfigError

FORMAT = 1


@dataclass(frozen=True)
class Manifest:
    """What every party of a federation knows (module docstring).

    Attributes
    ----------
    name
        Label of the data source.
    client_rows
        ``int64`` array of ``p + 1`` offsets: client ``c`` owns the rows
        ``client_rows[c]:client_rows[c+1]`` of the federation's row order.
    item_ids
        The raw item ids; the position of an id is its item index.
    normalizer
        The map of ratings to the normalized scale, fitted on all training ratings.
    value_range
        Smallest and largest training rating.
    source
        How the split was made (the data settings), for the record.
    kind
        ``"ratings"``, or ``"boolean"`` for a binary matrix split by rows (Felb's data: the
        items are its columns ``0..m-1``, the normalizer is the identity).
    """

    name: str
    client_rows: np.ndarray
    item_ids: np.ndarray
    normalizer: Normalizer
    value_range: tuple[float, float]
    source: dict[str, Any]
    kind: str = "ratings"

    @property
    def n_clients(self) -> int:
        """Number of clients ``p``."""
        return len(self.client_rows) - 1

    @property
    def n_users(self) -> int:
        """Number of user rows over all clients."""
        return int(self.client_rows[-1])

    @property
    def n_items(self) -> int:
        """Number of items ``n``."""
        return len(self.item_ids)

    def rows_of(self, client: int) -> slice:
        """The rows of ``client``'s users in the federation's row order."""
        if not 0 <= client < self.n_clients:
            raise ConfigError(f"client {client} is not one of the manifest's {self.n_clients}")
        return slice(int(self.client_rows[client]), int(self.client_rows[client + 1]))

    def federation_info(self, data_kind: str) -> FederationInfo:
        """The facts the protocol's functions take, for an algorithm of ``data_kind`` (one for
        the other kind of data is refused)."""
        if data_kind != self.kind:
            raise ConfigError(f"the algorithm needs {data_kind} data, the manifest holds "
                              f"{self.kind} data (split again with the algorithm's data)")
        if self.kind == "boolean":
            return FederationInfo(self.n_clients, self.n_items, client_rows=self.client_rows,
                                  kind="boolean")
        return FederationInfo(self.n_clients, self.n_items, self.normalizer, self.value_range,
                              self.client_rows)

    def write(self, path: Path) -> None:
        """Write as JSON."""
        doc = {
            "format": FORMAT,
            "kind": self.kind,
            "name": self.name,
            "clients": self.n_clients,
            "users": self.n_users,
            "items": self.n_items,
            "client_rows": self.client_rows.tolist(),
            "normalizer": vars(self.normalizer),
            "value_range": list(self.value_range),
            "item_ids": self.item_ids.tolist(),
            "source": self.source,
        }
        path.write_text(json.dumps(doc, indent=1) + "\n")

    @classmethod
    def read(cls, path: str | Path) -> Manifest:
        """Read a manifest written by :meth:`write`."""
        path = Path(path)
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: not a readable manifest ({exc})") from None
        if doc.get("format") != FORMAT:
            raise ConfigError(f"{path}: manifest format {doc.get('format')!r}, expected {FORMAT}")
        return cls(
            name=doc["name"],
            client_rows=np.asarray(doc["client_rows"], dtype=np.int64),
            item_ids=np.asarray(doc["item_ids"]),
            normalizer=Normalizer(**doc["normalizer"]),
            value_range=(float(doc["value_range"][0]), float(doc["value_range"][1])),
            source=doc["source"],
            kind=doc.get("kind", "ratings"),
        )
