"""Protobuf message classes for the tests, built without ``protoc``: FileDescriptorProtos
written in Python, added to a fresh descriptor pool, classes from ``message_factory``.

Two files, as ``protoc`` would describe them::

    // shop/common.proto
    syntax = "proto3";
    package shop;
    message Money { int64 units = 1; string currency = 2; }

    // shop/order.proto
    syntax = "proto3";
    package shop;
    import "google/protobuf/timestamp.proto";
    import "shop/common.proto";
    enum Status { STATUS_UNSPECIFIED = 0; PLACED = 1; SHIPPED = 2; }
    message Order {
      message Line {
        message Discount { int32 percent = 1; }
        string sku = 1; int32 quantity = 2; Money price = 3; Discount discount = 4;
      }
      int64 id = 1;
      string customer = 2;
      Status status = 3;
      repeated Line lines = 4;
      map<string, string> tags = 5;          // the nested type Order.TagsEntry
      google.protobuf.Timestamp placed_at = 6;
      Money total = 7;
    }
    message Refund { int64 order_id = 1; string reason = 2; }
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

__all__ = ["ShopMessages", "an_order", "common_file", "order_file", "shop_messages"]

_F = descriptor_pb2.FieldDescriptorProto


@dataclass(frozen=True)
class ShopMessages:
    """The classes of one pool (a class from another pool is another class)."""

    pool: descriptor_pool.DescriptorPool
    Money: Any
    Order: Any
    Line: Any
    Discount: Any
    Refund: Any
    #: The enum's values by name.
    Status: dict[str, int]


def _field(
    message: descriptor_pb2.DescriptorProto,
    name: str,
    number: int,
    kind: int,
    type_name: str = "",
    repeated: bool = False,
) -> None:
    field = message.field.add(
        name=name,
        number=number,
        type=kind,
        label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL,
    )
    if type_name:  # set, even empty, it says the field is of a named type
        field.type_name = type_name


def common_file() -> descriptor_pb2.FileDescriptorProto:
    """``shop/common.proto``."""
    file = descriptor_pb2.FileDescriptorProto(
        name="shop/common.proto", package="shop", syntax="proto3"
    )
    money = file.message_type.add(name="Money")
    _field(money, "units", 1, _F.TYPE_INT64)
    _field(money, "currency", 2, _F.TYPE_STRING)
    return file


def order_file(*, map_before_line: bool = False) -> descriptor_pb2.FileDescriptorProto:
    """``shop/order.proto``; ``map_before_line`` declares the map field's entry type before
    ``Order.Line`` (so that ``Line`` is the second nested type)."""
    file = descriptor_pb2.FileDescriptorProto(
        name="shop/order.proto",
        package="shop",
        syntax="proto3",
        dependency=["google/protobuf/timestamp.proto", "shop/common.proto"],
    )
    status = file.enum_type.add(name="Status")
    for number, name in enumerate(("STATUS_UNSPECIFIED", "PLACED", "SHIPPED")):
        status.value.add(name=name, number=number)

    order = file.message_type.add(name="Order")

    def add_entry() -> None:
        entry = order.nested_type.add(name="TagsEntry")
        entry.options.map_entry = True
        _field(entry, "key", 1, _F.TYPE_STRING)
        _field(entry, "value", 2, _F.TYPE_STRING)

    if map_before_line:
        add_entry()
    line = order.nested_type.add(name="Line")
    discount = line.nested_type.add(name="Discount")
    _field(discount, "percent", 1, _F.TYPE_INT32)
    _field(line, "sku", 1, _F.TYPE_STRING)
    _field(line, "quantity", 2, _F.TYPE_INT32)
    _field(line, "price", 3, _F.TYPE_MESSAGE, ".shop.Money")
    _field(line, "discount", 4, _F.TYPE_MESSAGE, ".shop.Order.Line.Discount")
    if not map_before_line:
        add_entry()
    _field(order, "id", 1, _F.TYPE_INT64)
    _field(order, "customer", 2, _F.TYPE_STRING)
    _field(order, "status", 3, _F.TYPE_ENUM, ".shop.Status")
    _field(order, "lines", 4, _F.TYPE_MESSAGE, ".shop.Order.Line", repeated=True)
    _field(order, "tags", 5, _F.TYPE_MESSAGE, ".shop.Order.TagsEntry", repeated=True)
    _field(order, "placed_at", 6, _F.TYPE_MESSAGE, ".google.protobuf.Timestamp")
    _field(order, "total", 7, _F.TYPE_MESSAGE, ".shop.Money")

    refund = file.message_type.add(name="Refund")
    _field(refund, "order_id", 1, _F.TYPE_INT64)
    _field(refund, "reason", 2, _F.TYPE_STRING)
    return file


def shop_messages(*, map_before_line: bool = False) -> ShopMessages:
    """The classes, in a pool of their own."""
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(common_file())
    pool.Add(order_file(map_before_line=map_before_line))

    def get(name: str) -> Any:
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))

    status = pool.FindEnumTypeByName("shop.Status")
    return ShopMessages(
        pool=pool,
        Money=get("shop.Money"),
        Order=get("shop.Order"),
        Line=get("shop.Order.Line"),
        Discount=get("shop.Order.Line.Discount"),
        Refund=get("shop.Refund"),
        Status={value.name: value.number for value in status.values},
    )


def an_order(messages: ShopMessages, number: int) -> Any:
    """An ``Order`` with every kind of field set (some left empty on some numbers)."""
    order = messages.Order(
        id=number,
        customer=f"customer-{number}",
        status=messages.Status["SHIPPED" if number % 2 else "PLACED"],
    )
    for index in range(number % 3 + 1):
        line = order.lines.add(sku=f"sku-{number}-{index}", quantity=index + 1)
        line.price.units = 100 * (index + 1)
        line.price.currency = "EUR"
        if index == 1:
            line.discount.percent = 10
    order.tags["channel"] = "web" if number % 2 else "shop"
    if number % 4 == 0:
        order.tags["gift"] = "yes"
    order.placed_at.seconds = 1_700_000_000 + number
    order.placed_at.nanos = number * 1000
    order.total.units = sum(line.price.units * line.quantity for line in order.lines)
    order.total.currency = "EUR"
    return order
