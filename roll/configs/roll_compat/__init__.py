"""ROLL's vocabulary → roll's: everything the loader does to a ROLL YAML before and after the strict build.

- `translate` (translate.py): ROLL's spellings rewritten in the resolved plain dict, refused keys reported;
- `keys` (keys.py): the table of ROLL's keys (alias / refused, with the reason) that docs/roll_compatibility.md
  is generated from (scripts/roll_compat_page.py);
- `example_keys`, `judge`, `lengths`, `env_types`: the keys of ROLL's current example YAMLs, its judge server,
  the agentic lengths from `sequence_length`, and why ROLL's environment names roll does not build are refused.

A pipeline kind plugs its own translations in through its config class (`roll_translate`, `roll_blocks`,
`check_roll_keys`, `note_roll_keys`: roll/configs/base.py); this package keeps no list of kinds.
"""

from roll.configs.roll_compat.translate import check_roll_keys, note_roll_spellings, reward_mapping, translate

__all__ = ["translate", "check_roll_keys", "note_roll_spellings", "reward_mapping"]
