"""ALFWorld's vocabulary for generated games: rooms, their receptacles, objects, what
holds what, and which objects can be cleaned, heated, cooled or used as a light.

Names are ALFRED/AI2-THOR class names (as in ALFWorld's PDDL problems); the games show
them lower-cased (``CounterTop`` -> ``countertop 1``).
"""

from __future__ import annotations

# receptacle type -> (openable, (min, max) instances) per room type
ROOMS: dict[str, dict[str, tuple[bool, tuple[int, int]]]] = {
    "Kitchen": {
        "Cabinet": (True, (2, 6)), "CounterTop": (False, (1, 3)), "Drawer": (True, (1, 4)),
        "Fridge": (True, (1, 1)), "Microwave": (True, (1, 1)), "SinkBasin": (False, (1, 1)),
        "StoveBurner": (False, (2, 4)), "DiningTable": (False, (0, 1)),
        "GarbageCan": (False, (1, 1)), "CoffeeMachine": (False, (1, 1)),
        "Toaster": (False, (0, 1)), "Shelf": (False, (0, 2)),
    },
    "Bathroom": {
        "BathtubBasin": (False, (0, 1)), "Cabinet": (True, (1, 4)),
        "CounterTop": (False, (1, 1)), "Drawer": (True, (0, 3)), "GarbageCan": (False, (1, 1)),
        "HandTowelHolder": (False, (1, 1)), "SinkBasin": (False, (1, 2)),
        "Toilet": (False, (1, 1)), "ToiletPaperHanger": (False, (1, 1)),
        "TowelHolder": (False, (1, 1)), "Shelf": (False, (0, 2)),
    },
    "Bedroom": {
        "Bed": (False, (1, 1)), "Desk": (False, (0, 1)), "Drawer": (True, (1, 5)),
        "Dresser": (False, (0, 1)), "GarbageCan": (False, (1, 1)), "Shelf": (False, (1, 4)),
        "SideTable": (False, (1, 2)), "Safe": (True, (0, 1)),
        "LaundryHamper": (False, (0, 1)), "ArmChair": (False, (0, 1)),
    },
    "LivingRoom": {
        "Sofa": (False, (1, 1)), "ArmChair": (False, (0, 2)), "CoffeeTable": (False, (1, 1)),
        "SideTable": (False, (1, 2)), "TVStand": (False, (1, 1)), "Drawer": (True, (0, 4)),
        "Shelf": (False, (0, 3)), "Dresser": (False, (0, 1)), "GarbageCan": (False, (1, 1)),
        "Cabinet": (True, (0, 2)), "DiningTable": (False, (0, 1)),
    },
}

_SURFACES = {"CounterTop", "DiningTable", "CoffeeTable", "SideTable", "Desk", "Dresser",
             "Shelf", "TVStand"}
_BOXES = {"Cabinet", "Drawer"}
_SEATS = {"Sofa", "ArmChair", "Bed"}


def _r(*extra: str, surfaces: bool = True, boxes: bool = True) -> frozenset[str]:
    out = set(extra)
    if surfaces:
        out |= _SURFACES
    if boxes:
        out |= _BOXES
    return frozenset(out)


# object type -> (rooms it appears in, receptacle types that can hold it, properties)
# properties: c = cleanable, h = heatable, k = coolable (cold)
OBJECTS: dict[str, tuple[frozenset[str], frozenset[str], str]] = {
    # kitchen food
    "Apple": (frozenset({"Kitchen"}), _r("Fridge", "Microwave", "SinkBasin", "GarbageCan"), "chk"),
    "Bread": (frozenset({"Kitchen"}), _r("Fridge", "Microwave"), "hk"),
    "Egg": (frozenset({"Kitchen"}), _r("Fridge", "Microwave", "SinkBasin", "GarbageCan"), "chk"),
    "Lettuce": (frozenset({"Kitchen"}), _r("Fridge", "SinkBasin", "GarbageCan"), "ck"),
    "Potato": (frozenset({"Kitchen"}), _r("Fridge", "Microwave", "SinkBasin", "GarbageCan"), "chk"),
    "Tomato": (frozenset({"Kitchen"}), _r("Fridge", "Microwave", "SinkBasin", "GarbageCan"), "chk"),
    # kitchen ware
    "Mug": (frozenset({"Kitchen", "Bedroom"}), _r("Fridge", "Microwave", "SinkBasin", "CoffeeMachine"), "chk"),
    "Cup": (frozenset({"Kitchen"}), _r("Fridge", "Microwave", "SinkBasin"), "chk"),
    "Bowl": (frozenset({"Kitchen", "LivingRoom"}), _r("Fridge", "Microwave", "SinkBasin"), "ck"),
    "Plate": (frozenset({"Kitchen", "LivingRoom"}), _r("Fridge", "Microwave", "SinkBasin"), "chk"),
    "Pan": (frozenset({"Kitchen"}), _r("Fridge", "SinkBasin", "StoveBurner"), "ck"),
    "Pot": (frozenset({"Kitchen"}), _r("Fridge", "SinkBasin", "StoveBurner"), "ck"),
    "Knife": (frozenset({"Kitchen"}), _r("SinkBasin"), "c"),
    "ButterKnife": (frozenset({"Kitchen"}), _r("SinkBasin"), "c"),
    "Fork": (frozenset({"Kitchen"}), _r("SinkBasin"), "c"),
    "Spoon": (frozenset({"Kitchen"}), _r("SinkBasin"), "c"),
    "Spatula": (frozenset({"Kitchen"}), _r("SinkBasin"), "c"),
    "Ladle": (frozenset({"Kitchen"}), _r("SinkBasin"), "c"),
    "DishSponge": (frozenset({"Kitchen", "Bathroom"}), _r("SinkBasin", "BathtubBasin", "GarbageCan", "Toilet"), "c"),
    "SaltShaker": (frozenset({"Kitchen"}), _r(), ""),
    "PepperShaker": (frozenset({"Kitchen"}), _r(), ""),
    "Kettle": (frozenset({"Kitchen"}), _r("StoveBurner"), ""),
    "WineBottle": (frozenset({"Kitchen"}), _r("Fridge", "GarbageCan"), "k"),
    "SoapBottle": (frozenset({"Kitchen", "Bathroom"}), _r("GarbageCan", "Toilet"), ""),
    # bathroom
    "SoapBar": (frozenset({"Bathroom"}), _r("SinkBasin", "BathtubBasin", "Toilet", "GarbageCan"), "c"),
    "Cloth": (frozenset({"Bathroom", "Bedroom"}), _r("SinkBasin", "BathtubBasin", "Toilet", "LaundryHamper", "GarbageCan"), "c"),
    "Candle": (frozenset({"Bathroom", "LivingRoom"}), _r("Toilet"), ""),
    "SprayBottle": (frozenset({"Bathroom"}), _r("Toilet", "GarbageCan"), ""),
    "ToiletPaper": (frozenset({"Bathroom"}), _r("Toilet", "ToiletPaperHanger", "GarbageCan"), ""),
    "Towel": (frozenset({"Bathroom"}), _r("TowelHolder", "BathtubBasin", "LaundryHamper", boxes=False), ""),
    "HandTowel": (frozenset({"Bathroom"}), _r("HandTowelHolder", boxes=False), ""),
    "TissueBox": (frozenset({"Bathroom", "LivingRoom"}), _r("Toilet", "GarbageCan"), ""),
    "Plunger": (frozenset({"Bathroom"}), frozenset({"CounterTop", "Shelf", "Cabinet"}), ""),
    "ScrubBrush": (frozenset({"Bathroom"}), frozenset({"CounterTop", "Shelf", "Cabinet", "Toilet"}), ""),
    # bedroom / living room
    "AlarmClock": (frozenset({"Bedroom"}), _r(boxes=False), ""),
    "Book": (frozenset({"Bedroom", "LivingRoom"}), _r("Bed", "Sofa", "ArmChair"), ""),
    "CD": (frozenset({"Bedroom", "LivingRoom"}), _r("Safe", "GarbageCan"), ""),
    "CellPhone": (frozenset({"Bedroom", "LivingRoom"}), _r("Bed", "Sofa", "ArmChair", "Safe"), ""),
    "CreditCard": (frozenset({"Bedroom", "LivingRoom"}), _r("Bed", "Sofa", "ArmChair", "Safe"), ""),
    "KeyChain": (frozenset({"Bedroom", "LivingRoom"}), _r("Bed", "Sofa", "ArmChair", "Safe"), ""),
    "Laptop": (frozenset({"Bedroom", "LivingRoom"}), _r("Bed", "Sofa", "ArmChair", boxes=False), ""),
    "Pen": (frozenset({"Bedroom", "LivingRoom"}), _r("GarbageCan"), ""),
    "Pencil": (frozenset({"Bedroom", "LivingRoom"}), _r("GarbageCan"), ""),
    "Pillow": (frozenset({"Bedroom", "LivingRoom"}), frozenset(_SEATS), ""),
    "TeddyBear": (frozenset({"Bedroom"}), _r("Bed", "ArmChair", boxes=False), ""),
    "Watch": (frozenset({"Bedroom", "LivingRoom"}), _r("Safe"), ""),
    "BaseballBat": (frozenset({"Bedroom"}), frozenset({"Bed", "Desk", "Shelf"}), ""),
    "TennisRacket": (frozenset({"Bedroom"}), frozenset({"Bed", "Desk", "Shelf"}), ""),
    "Box": (frozenset({"Bedroom", "LivingRoom"}), _r("Bed", "Sofa", "ArmChair", boxes=False), ""),
    "Newspaper": (frozenset({"LivingRoom"}), _r("Sofa", "ArmChair", "GarbageCan"), ""),
    "RemoteControl": (frozenset({"LivingRoom"}), _r("Sofa", "ArmChair"), ""),
    "Statue": (frozenset({"LivingRoom"}), _r(), ""),
    "Vase": (frozenset({"LivingRoom"}), _r(), ""),
    "WateringCan": (frozenset({"LivingRoom"}), frozenset(_SURFACES), ""),
}

# Lights for look_at_obj_in_light (toggleable, not portable), and where they stand.
LAMP_HOLDERS = ("Desk", "SideTable", "Dresser")
LAMP = "DeskLamp"

# Task type -> rooms it is generated in (as in ALFWorld: heat/cool need a kitchen, the
# light tasks a living room or bedroom).
TASK_ROOMS = {
    "pick_and_place_simple": ("Kitchen", "LivingRoom", "Bathroom", "Bedroom"),
    "look_at_obj_in_light": ("LivingRoom", "Bedroom"),
    "pick_clean_then_place_in_recep": ("Kitchen", "Bathroom"),
    "pick_heat_then_place_in_recep": ("Kitchen",),
    "pick_cool_then_place_in_recep": ("Kitchen",),
    "pick_two_obj_and_place": ("Kitchen", "LivingRoom", "Bathroom", "Bedroom"),
}

# Receptacle types used as goal targets (a goal into a sink or a garbage can is allowed,
# as in ALFWorld; appliances are the tools of the clean/heat/cool tasks, not targets).
NOT_TARGETS = frozenset({"Microwave", "SinkBasin", "BathtubBasin", "StoveBurner",
                         "CoffeeMachine", "Toaster", "ToiletPaperHanger"})
