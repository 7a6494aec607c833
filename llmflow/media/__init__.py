"""Images in a request: reading the ways each protocol gives one (`refs`), decoding and checking
them within limits (`images`), fetching `http(s)` URLs a server allows (`urls`), and reading a
conversation's images at once (`reader`). Everything about image bytes lives here; the protocol
readers only recognise their shapes."""
