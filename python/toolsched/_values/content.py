"""Images in tool outputs: the ``Image`` value, and outputs read as text and image parts.

A tool's output is sent to the model as images (each provider's image part,
never cut by the result budget) when it is:

- an ``Image``, or ``bytes`` that start like a PNG, JPEG, GIF or WEBP file;
- an image block as Anthropic's API spells it
  (``{"type": "image", "source": {"type": "base64", "media_type": ..., "data": ...}}``)
  or as MCP does (``{"type": "image", "data": ..., "mimeType": ...}``, or the
  ``ImageContent`` object);
- a list or tuple of those, text (``str``) and text blocks
  (``{"type": "text", "text": ...}``) with at least one image in it: an MCP
  tool's content, say.

Anything else is sent as before (text, or JSON). An image inside another value
(a dict with an image field) is not looked for: it goes as JSON. Journals and
run states keep an image in its MCP form, which reads back as the same image.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["IMAGE_MEDIA_TYPES", "Image", "content_parts", "content_text", "image_of"]

# The image types every supported API accepts in a tool result.
IMAGE_MEDIA_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
# Other spellings producers use for them (compared lowercased).
_ALIASES = {"image/jpg": "image/jpeg", "image/pjpeg": "image/jpeg", "image/x-png": "image/png"}


def _sniffed(data: bytes) -> str | None:
    """The media type the first bytes of ``data`` announce, or None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return "image/webp"
    return None


@dataclass(frozen=True, slots=True, repr=False)
class Image:
    """An image a tool returns: its bytes and media type (read from the bytes when not given).

    ``media_type`` is one of ``IMAGE_MEDIA_TYPES``; anything else, bytes that
    are no image when the type is left out, or data that is not bytes raise
    ``ValueError`` / ``TypeError`` naming the field.
    """

    data: bytes
    media_type: str = ""

    def __post_init__(self) -> None:
        data = self.data
        if isinstance(data, (bytearray, memoryview)):
            data = bytes(data)
            object.__setattr__(self, "data", data)
        if not isinstance(data, bytes):
            raise TypeError(f"Image(data) takes bytes, got {type(data).__name__}")
        if not isinstance(self.media_type, str):
            raise TypeError(f"Image(media_type) takes a string, got {type(self.media_type).__name__}")
        if not self.media_type:
            sniffed = _sniffed(data)
            if sniffed is None:
                raise ValueError(
                    f"Image(data) does not start like a PNG, JPEG, GIF or WEBP file (first bytes {data[:8]!r}); "
                    "give media_type"
                )
            object.__setattr__(self, "media_type", sniffed)
        elif self.media_type not in IMAGE_MEDIA_TYPES:
            spelled = _ALIASES.get(self.media_type.strip().lower(), self.media_type.strip().lower())
            if spelled in IMAGE_MEDIA_TYPES:
                object.__setattr__(self, "media_type", spelled)
                return
            raise ValueError(
                f"Image(media_type) must be one of {', '.join(IMAGE_MEDIA_TYPES)}, got {self.media_type!r}"
            )

    @classmethod
    def from_base64(cls, text: str, media_type: str = "") -> Image:
        """An image from base64 text; ``ValueError`` when the text is not base64."""
        try:
            # Line breaks and spaces (as MIME encoders put every 76 characters) are not part of the data.
            data = base64.b64decode("".join(text.split()) if isinstance(text, str) else text, validate=True)
        except (binascii.Error, ValueError, TypeError) as exc:
            raise ValueError(f"Image.from_base64: the text is not base64 ({exc})") from None
        return cls(data, media_type)

    def base64(self) -> str:
        """The bytes as base64 text."""
        return base64.b64encode(self.data).decode("ascii")

    def data_url(self) -> str:
        """``data:{media_type};base64,...``: the form OpenAI's APIs take."""
        return f"data:{self.media_type};base64,{self.base64()}"

    def to_json(self) -> dict[str, str]:
        """The image as MCP spells it: ``{"type": "image", "data": base64, "mimeType": ...}``."""
        return {"type": "image", "data": self.base64(), "mimeType": self.media_type}

    def describe(self) -> str:
        """A short stand-in where only text can go: ``[image/png image, 1,234 bytes]``."""
        return f"[{self.media_type} image, {len(self.data):,} bytes]"

    def __repr__(self) -> str:
        return f"Image(media_type={self.media_type!r}, {len(self.data):,} bytes)"


def _field(item: Any, *names: str) -> Any:
    if isinstance(item, Mapping):
        for name in names:
            if name in item:
                return item[name]
        return None
    for name in names:
        try:
            value = getattr(item, name, None)
        except Exception:  # an object whose attributes fail to read is no image block
            return None
        if value is not None:
            return value
    return None


def _from_base64(data: Any, media_type: Any) -> Image | None:
    if not isinstance(data, str) or not isinstance(media_type, str) or not media_type:
        return None
    try:
        return Image.from_base64(data, media_type)
    except (ValueError, TypeError):
        return None


def image_of(item: Any) -> Image | None:
    """``item`` as an ``Image`` when it is one of the image forms this module reads, else None."""
    kind = type(item)
    if kind is Image:
        return item  # type: ignore[no-any-return]
    if kind is bytes or kind is bytearray or kind is memoryview:
        media_type = _sniffed(bytes(item[:12]))
        return None if media_type is None else Image(bytes(item), media_type)
    if kind is str or item is None or kind is int or kind is float or kind is list:
        return None
    if isinstance(item, Image):
        return item
    if _field(item, "type") != "image":
        return None
    source = _field(item, "source")
    if source is not None:
        if _field(source, "type") != "base64":
            return None
        return _from_base64(_field(source, "data"), _field(source, "media_type"))
    return _from_base64(_field(item, "data"), _field(item, "mimeType", "mime_type"))


def _text_of(item: Any) -> str | None:
    if isinstance(item, str):
        return item
    if isinstance(item, (int, float, bool, bytes, list, tuple)) or item is None:
        return None
    if _field(item, "type") != "text":
        return None
    text = _field(item, "text")
    return text if isinstance(text, str) else None


def content_parts(output: Any) -> tuple[str | Image, ...] | None:
    """An output as text and image parts when it holds an image (see the module's text), else None."""
    kind = type(output)
    if kind is str or output is None or kind is int or kind is float or kind is bool:
        return None
    if kind is dict and output.get("type") != "image":
        return None
    if kind is list or kind is tuple:
        parts: list[str | Image] = []
        images = 0
        for item in output:
            image = image_of(item)
            if image is not None:
                parts.append(image)
                images += 1
                continue
            text = _text_of(item)
            if text is None:
                return None
            parts.append(text)
        return tuple(parts) if images else None
    image = image_of(output)
    return None if image is None else (image,)


def content_text(parts: tuple[str | Image, ...], *, describe: bool = True) -> str:
    """The text of content parts joined by newlines; images as short stand-ins, or left out."""
    pieces = [part if isinstance(part, str) else part.describe() for part in parts if describe or isinstance(part, str)]
    return "\n".join(piece for piece in pieces if piece)
