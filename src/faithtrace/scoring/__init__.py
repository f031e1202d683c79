"""Pure scoring: steps with pydantic in/out models composed into the faithfulness pipeline. No OTel here."""
