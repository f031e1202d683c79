"""The lowest layer: the errors users catch, our own failures kept from the host, secret scrubbing, readable
cuts of text."""
