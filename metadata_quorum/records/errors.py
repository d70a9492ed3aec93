"""Typed errors of the metadata record encoding."""

from __future__ import annotations


class MetadataRecordError(ValueError):
    """A metadata record value could not be decoded (garbage, truncation, bad field).

    Decoding never raises anything else, whatever the input bytes.
    """


class UnknownRecordTypeError(MetadataRecordError):
    """The frame names a record type this code does not know."""

    def __init__(self, type_id: int) -> None:
        super().__init__(f"unknown metadata record type {type_id}")
        self.type_id = type_id


class UnsupportedRecordVersionError(MetadataRecordError):
    """The record type is known, but not at this version."""

    def __init__(self, type_name: str, version: int, supported: tuple[int, ...]) -> None:
        super().__init__(
            f"{type_name} version {version} is not supported (supported: {list(supported)})"
        )
        self.type_name = type_name
        self.version = version
        self.supported = supported
