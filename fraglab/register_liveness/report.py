"""(being written)"""


def glue_values(doc: dict) -> dict:
    return {}
