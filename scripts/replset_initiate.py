"""Initiates a replica set whose members already run, and waits for a primary.

Usage: replset_initiate.py NAME HOST:PORT [HOST:PORT ...]
The first member is preferred as primary (priority 2) so tests know where it is.
"""

import sys
import time

from pymongo import MongoClient
from pymongo.errors import OperationFailure, PyMongoError


def main() -> int:
    name, hosts = sys.argv[1], sys.argv[2:]
    members = [
        {"_id": i, "host": host, "priority": 2 if i == 0 else 1}
        for i, host in enumerate(hosts)
    ]
    first = MongoClient(hosts[0], directConnection=True, serverSelectionTimeoutMS=20000)
    try:
        first.admin.command("replSetInitiate", {"_id": name, "members": members})
    except OperationFailure as failure:
        if failure.code != 23:  # AlreadyInitialized
            raise
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if first.admin.command("hello").get("isWritablePrimary"):
                # Every member must have caught up far enough to acknowledge majority writes.
                client = MongoClient(
                    ",".join(hosts), replicaSet=name, serverSelectionTimeoutMS=20000
                )
                client.get_database("admin").command("ping")
                client["streamward_probe"].get_collection(
                    "probe", write_concern=_majority()
                ).insert_one({"ready": True})
                client.drop_database("streamward_probe")
                return 0
        except PyMongoError:
            pass
        time.sleep(0.2)
    print(f"replica set {name} elected no primary within 60 s", file=sys.stderr)
    return 1


def _majority():
    from pymongo.write_concern import WriteConcern

    return WriteConcern(w="majority", wtimeout=30000)


if __name__ == "__main__":
    sys.exit(main())
