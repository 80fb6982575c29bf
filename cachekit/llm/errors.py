"""The error a refused request raises, with the body the OpenAI API would send."""

from __future__ import annotations

from typing import Any

__all__ = ["RequestError"]


class RequestError(ValueError):
    """A request that must be refused (HTTP ``status``, 400 unless said otherwise), with an
    OpenAI-style error body in :meth:`body`."""

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        status: int = 400,
        code: str | None = None,
        type: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.code = code
        self.type = type

    def body(self) -> dict[str, Any]:
        """``{"error": {"message", "type", "param", "code"}}`` as the OpenAI API sends it."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }
