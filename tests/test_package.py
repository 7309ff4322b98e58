"""The model package's loader (engine/package.py) reads nothing from outside the package: a
model.json whose ``files`` name an absolute path, a path that climbs out with ``..``, or a file
linked out of the directory is refused at start-up, naming the entry, with its checksums right."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from engine import contract
from engine.package import ModelPackage, PackageError, manifest_checksum, sha256


def _outside(entry: str) -> str:
    return f"files entry {entry!r} lies outside the package directory; every file of a package is in it"


def test_files_outside_the_package_are_refused_naming_the_entry(tiny_package, tmp_path):
    bad = tmp_path / "deploy" / "pkg"
    shutil.copytree(tiny_package, bad)
    secret = tmp_path / "secret.txt"
    secret.write_text("not the package's\n")
    climbing = os.path.relpath(secret, bad)  # ../../secret.txt
    assert climbing.startswith("..")
    m = json.loads((bad / contract.MANIFEST).read_text())
    # Listed with their true sha256 and model.json's checksum written again: only where they lie is wrong.
    m["files"][climbing] = m["files"][str(secret)] = sha256(secret)
    m["checksum"] = manifest_checksum(m)
    (bad / contract.MANIFEST).write_text(json.dumps(m, indent=2))
    with pytest.raises(PackageError) as err:
        ModelPackage.load(bad)
    assert err.value.problems == [_outside(climbing), _outside(str(secret))]
    assert str(err.value) == (f"model package {bad} is not valid: {_outside(climbing)}; {_outside(str(secret))} "
                              "(export the checkpoint again with nmt-export)")


def test_a_package_file_linked_out_of_the_directory_is_refused(tiny_package, tmp_path):
    bad = tmp_path / "pkg"
    shutil.copytree(tiny_package, bad)
    elsewhere = tmp_path / "tokenizer.model"
    shutil.move(bad / contract.TOKENIZER, elsewhere)
    (bad / contract.TOKENIZER).symlink_to(elsewhere)  # same bytes, same sha256
    with pytest.raises(PackageError) as err:
        ModelPackage.load(bad)
    assert err.value.problems == [_outside(contract.TOKENIZER)]


def test_a_package_reached_through_a_link_still_loads(tiny_package, tmp_path):
    """The check follows links from the package's real directory, so a linked directory is fine."""
    link = tmp_path / "current"
    link.symlink_to(tiny_package, target_is_directory=True)
    assert ModelPackage.load(link).variants == ModelPackage.load(tiny_package).variants
